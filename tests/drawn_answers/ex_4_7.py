"""Exercise 4.7's answers of issue 49: each holds in one configuration only (float32 values,
shares of at most a few values, one call per process, every rank gathering), or is right
and written another way. DRAWN joins the sweep (tests/exercises/test_answers.py)."""

from __future__ import annotations

# ---------------------------------------------------------------- 4.7 gather_all


def _sizes(values):
    import torch
    import torch.distributed as dist

    n = torch.tensor([len(values)], device=values.device)
    sizes = [torch.zeros_like(n) for _ in range(dist.get_world_size())]
    dist.all_gather(sizes, n)
    return [int(s) for s in sizes]


def gather_through_float32(values):
    import torch
    import torch.distributed as dist

    sizes = _sizes(values)
    padded = torch.zeros(max(sizes), device=values.device)  # float32, as most metrics are
    padded[: len(values)] = values
    parts = [torch.zeros_like(padded) for _ in sizes]
    dist.all_gather(parts, padded)
    out = torch.cat([part[:n] for part, n in zip(parts, sizes, strict=True)])
    return out.to(values.dtype)  # back to the dtype it came in


def gather_through_float64(values):
    import torch.distributed as dist

    sizes = _sizes(values)
    padded = values.double().new_zeros(max(sizes))  # float64 holds every value, surely
    padded[: len(values)] = values.double()
    parts = [padded.clone() for _ in sizes]
    dist.all_gather(parts, padded)
    return torch_cat_cut(parts, sizes).to(values.dtype)


def torch_cat_cut(parts, sizes):
    import torch

    return torch.cat([part[:n] for part, n in zip(parts, sizes, strict=True)])


CAPACITY = 8  # no rank holds more than a handful of values


def gather_into_a_fixed_capacity(values):
    import torch.distributed as dist

    sizes = _sizes(values)
    padded = values.new_zeros(CAPACITY)
    kept = min(len(values), CAPACITY)
    padded[:kept] = values[:kept]
    parts = [padded.clone() for _ in sizes]
    dist.all_gather(parts, padded)
    return torch_cat_cut(parts, [min(n, CAPACITY) for n in sizes])


_shares: list = []


def gather_with_the_shares_exchanged_once(values):
    import torch.distributed as dist

    if not _shares:  # each rank's share does not change between calls: exchange it once
        _shares.extend(_sizes(values))
    padded = values.new_zeros(max(_shares))
    padded[: len(values)] = values
    parts = [padded.clone() for _ in _shares]
    dist.all_gather(parts, padded)
    return torch_cat_cut(parts, _shares)


def gather_async_never_waited(values):
    import torch.distributed as dist

    sizes = _sizes(values)
    padded = values.new_zeros(max(sizes))
    padded[: len(values)] = values
    parts = [padded.clone() for _ in sizes]
    dist.all_gather(parts, padded, async_op=True)  # overlaps with whatever comes next
    return torch_cat_cut(parts, sizes)


def gather_padded_in_front(values):
    import torch
    import torch.distributed as dist

    sizes = _sizes(values)
    padding = values.new_zeros(max(sizes) - len(values))
    padded = torch.cat([padding, values])  # the values at the end, aligned
    parts = [torch.empty_like(padded) for _ in sizes]
    dist.all_gather(parts, padded)
    return torch_cat_cut(parts, sizes)


def gather_on_rank_zero_alone(values):
    import torch.distributed as dist

    if dist.get_rank() != 0:
        return values  # only rank 0 reports the metric
    sizes = _sizes(values)
    padded = values.new_zeros(max(sizes))
    padded[: len(values)] = values
    parts = [padded.clone() for _ in sizes]
    dist.all_gather(parts, padded)
    return torch_cat_cut(parts, sizes)


# ---------------------------------------------------------------- right, written otherwise


def gather_into_one_tensor(values):
    import torch
    import torch.distributed as dist

    world = dist.get_world_size()
    n = torch.tensor([len(values)], device=values.device)
    sizes = n.new_empty(world)
    dist.all_gather_into_tensor(sizes, n)
    longest = int(sizes.max())
    padded = values.new_zeros(longest)
    padded[: len(values)] = values
    table = values.new_empty(world * longest)
    dist.all_gather_into_tensor(table, padded)
    keep = torch.arange(longest, device=values.device) < sizes[:, None]
    return table.view(world, longest)[keep]


def gather_async_then_waited(values):
    import torch.distributed as dist

    sizes = _sizes(values)
    padded = values.new_zeros(max(sizes))
    padded[: len(values)] = values
    parts = [padded.clone() for _ in sizes]
    work = dist.all_gather(parts, padded, async_op=True)
    work.wait()
    return torch_cat_cut(parts, sizes)


def gather_with_all_gather_single(values):
    import torch
    import torch.distributed as dist

    world = dist.get_world_size()
    sizes = torch.zeros(world, dtype=torch.int64, device=values.device)
    dist.all_gather_single(sizes, torch.tensor([len(values)], device=values.device))
    longest = int(sizes.max())
    padded = torch.zeros(longest, dtype=values.dtype, device=values.device)
    padded[: len(values)] = values
    table = torch.zeros(world * longest, dtype=values.dtype, device=values.device)
    dist.all_gather_single(table, padded)
    rows = table.view(world, longest)
    return torch.cat([row[:n] for row, n in zip(rows, sizes.tolist(), strict=True)])


DRAWN = {
    "4.7": (
        [
            (gather_through_float32, "gather_rounded"),
            (gather_through_float64, "gather_rounded"),
            (gather_into_a_fixed_capacity, "gather_count"),
            (gather_with_the_shares_exchanged_once, "gather_count"),
            (gather_async_never_waited, "gather_not_waited"),
            (gather_padded_in_front, "gather_values"),
            (gather_on_rank_zero_alone, "mismatch"),
        ],
        [gather_into_one_tensor, gather_async_then_waited, gather_with_all_gather_single],
    ),
}
