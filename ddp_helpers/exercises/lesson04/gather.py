"""4.7 gather_all (Going further): all_gather of values of different lengths."""

from __future__ import annotations

from ...i18n import messages
from .._core import (
    Exercise,
    Mistake,
    Phrase,
    Wrong,
    and_list,
    process_group,
    run_on_ranks,
)
from ..devices import made_off_device

MESSAGES = messages(
    "exercises.lesson04.gather",
    {
        "hint.gather_pad": (
            "all_gather needs a tensor of one size on every rank. First all_gather each "
            "rank's length (a one-element tensor), then pad this rank's values with zeros to "
            "the longest, all_gather those, and cut each rank's part back to its length."
        ),
        "hint.gather_every_rank": (
            "all_gather leaves the same list on every rank, in rank order: concatenate it "
            "the same way on every rank, rank 0's part first."
        ),
        "hint.gather_code": (
            "n = torch.tensor([len(values)]); lengths = [torch.zeros_like(n) for _ in "
            "range(world)]; dist.all_gather(lengths, n); padded = values.new_zeros(longest); "
            "padded[: len(values)] = values; gathered = [torch.zeros_like(padded) ...]; "
            "dist.all_gather(gathered, padded); torch.cat([g[:k] for g, k in zip(gathered, "
            "lengths)])."
        ),
        "gather_sizes": (
            "On {ranks} ranks holding {lengths} values, all_gather got tensors of {sizes} "
            "elements: it takes one size on every rank (gloo aborts a rank, or the others "
            "wait forever). Pad each rank's values to the longest."
        ),
        "gather_sizes.title": "all_gather of tensors of different sizes",
        "gather_padding": (
            "On {ranks} ranks holding {lengths} values, rank {rank} returned {got} values, "
            "not {want}: the padding is still in. Cut each rank's part back to its length."
        ),
        "gather_padding.title": "the padding kept",
        "gather_count": (
            "On {ranks} ranks holding {lengths} values, rank {rank} returned {got} values; "
            "all ranks together hold {want}."
        ),
        "gather_count.title": "not every rank's values",
        "gather_disagree": (
            "On {ranks} ranks, rank {rank} returned other values than rank 0: every rank "
            "needs the whole list (a metric computed on rank 0 alone still needs every rank "
            "in the all_gather)."
        ),
        "gather_disagree.title": "not the same result on every rank",
        "gather_order": (
            "On {ranks} ranks, the values are all there but not in rank order: rank 0's "
            "first, then rank 1's, and so on."
        ),
        "gather_order.title": "not in rank order",
        "gather_dtype": (
            "The values came back as {got}, not {want}: pad with a tensor of the values' own "
            "dtype (values.new_zeros)."
        ),
        "gather_dtype.title": "another dtype",
        "gather_not_tensor": (
            "gather_all returned a {got}, not a tensor: return one 1-D tensor of all the "
            "ranks' values (torch.cat of the gathered parts)."
        ),
        "gather_not_tensor.title": "not a tensor",
        "gather_shape": (
            "gather_all returned a tensor of shape {shape}: return one 1-D tensor of all "
            "the ranks' values, in rank order (torch.cat of the parts, each cut back to its "
            "length)."
        ),
        "gather_shape.title": "not one 1-D tensor",
        "gather_ok": (
            "On 3 ranks holding 5, 0 and 3 values and on 2 ranks holding 4 and 4, float "
            "and integer: every rank returned every rank's values, in rank order, and every "
            "tensor it sent was made on the values' device."
        ),
    },
)


def gather_all(values):
    import torch
    import torch.distributed as dist

    world = dist.get_world_size()
    length = torch.tensor([len(values)], device=values.device)
    lengths = [torch.zeros_like(length) for _ in range(world)]
    dist.all_gather(lengths, length)  # first the sizes: all_gather needs one size
    padded = values.new_zeros(max(int(n) for n in lengths))
    padded[: len(values)] = values
    gathered = [torch.zeros_like(padded) for _ in range(world)]
    dist.all_gather(gathered, padded)
    return torch.cat([part[: int(n)] for part, n in zip(gathered, lengths, strict=True)])


# (ranks, each rank's number of values, dtype): uneven with an empty share, then even.
GATHER_CASES = ((3, (5, 0, 3), "float32"), (3, (5, 0, 3), "int64"), (2, (4, 4), "float32"))


def _gather_values(rank: int, lengths, dtype: str):
    import torch

    # Every value tells where it came from: 10 x its position. The first is a real 0, so an
    # answer that drops the padding by its value (zeros) loses it.
    start = sum(lengths[:rank])
    return (torch.arange(start, start + lengths[rank]) * 10).to(getattr(torch, dtype))


class _SizesDiffer(Exception):
    """all_gather called with tensors of different sizes on different ranks."""


def _spy_on_all_gather():
    """Before each all_gather (or all_gather_into_tensor), compare the ranks' sizes:
    unequal, every rank raises alike (gloo itself would abort one rank or hang the others)."""
    import torch
    import torch.distributed as dist

    real, into = dist.all_gather, dist.all_gather_into_tensor

    def same_sizes(tensor) -> None:
        size = torch.tensor([tensor.numel()], device=tensor.device)
        sizes = [torch.zeros_like(size) for _ in range(dist.get_world_size())]
        real(sizes, size)
        if len({int(n) for n in sizes}) > 1:
            raise _SizesDiffer([int(n) for n in sizes])

    def all_gather(tensor_list, tensor, *args, **kwargs):
        same_sizes(tensor)
        return real(tensor_list, tensor, *args, **kwargs)

    def all_gather_into_tensor(output, tensor, *args, **kwargs):
        same_sizes(tensor)
        return into(output, tensor, *args, **kwargs)

    dist.all_gather, dist.all_gather_into_tensor = all_gather, all_gather_into_tensor

    def restore() -> None:
        dist.all_gather, dist.all_gather_into_tensor = real, into

    return restore


def _gather_harness(fn, lengths, dtype):
    import torch
    import torch.distributed as dist

    with process_group():
        restore = _spy_on_all_gather()
        try:
            got = fn(_gather_values(dist.get_rank(), lengths, dtype))
        except _SizesDiffer as exc:
            return {"sizes": exc.args[0]}
        if not isinstance(got, torch.Tensor):
            return {"returned": type(got).__name__}
        if got.dim() != 1:
            return {"shape": list(got.shape)}
        seen = {"values": got.tolist(), "dtype": str(got.dtype).removeprefix("torch.")}
        restore()  # the probe sees torch's own all_gather, with its group and timeout
        values = _gather_values(dist.get_rank(), lengths, dtype)
        return {**seen, "off_device": made_off_device(fn, values)}


def _check_gather(fn) -> Phrase:
    import torch

    off_device = []
    for ranks, lengths, dtype in GATHER_CASES:
        runs = run_on_ranks(_gather_harness, fn, lengths, dtype, nprocs=ranks, timeout=20)
        want = torch.cat([_gather_values(r, lengths, dtype) for r in range(ranks)]).tolist()
        shown = and_list(lengths)
        for run in runs:
            if "sizes" in run:
                sizes = and_list(run["sizes"])
                raise Wrong("gather_sizes", ranks=ranks, lengths=shown, sizes=sizes)
            if "returned" in run:
                raise Wrong("gather_not_tensor", got=run["returned"])
            if "shape" in run:
                raise Wrong("gather_shape", shape=tuple(run["shape"]))
        for rank, run in enumerate(runs[1:], 1):
            if run != runs[0]:
                raise Wrong("gather_disagree", ranks=ranks, rank=rank)
        got = runs[0]["values"]
        count = {"ranks": ranks, "lengths": shown, "rank": 0, "got": len(got), "want": len(want)}
        if len(got) == ranks * max(lengths) != len(want):
            raise Wrong("gather_padding", **count)
        if sorted(got) != sorted(want):
            raise Wrong("gather_count", **count)
        if got != want:
            raise Wrong("gather_order", ranks=ranks)
        if runs[0]["dtype"] != dtype:
            raise Wrong("gather_dtype", got=runs[0]["dtype"], want=dtype)
        off_device += [run["off_device"] for run in runs if run["off_device"]]
    if off_device:  # after every case: what the answer computes wrong is named first
        raise Wrong("off_device", function="gather_all", collective=off_device[0])
    return Phrase("gather_ok")


q7 = Exercise(
    "4.7",
    "gather_all",
    _check_gather,
    gather_all,
    texts=MESSAGES,
    hints=("gather_pad", "gather_every_rank", "gather_code"),
    mistakes={
        "gather_sizes": Mistake(hint="gather_pad"),
        "gather_padding": Mistake(hint="gather_pad"),
        "gather_count": Mistake(hint="gather_every_rank"),
        "gather_disagree": Mistake(hint="gather_every_rank"),
        "gather_order": Mistake(hint="gather_every_rank"),
        "gather_dtype": Mistake(hint="gather_pad"),
        "gather_not_tensor": Mistake(hint="gather_pad"),
        "gather_shape": Mistake(hint="gather_every_rank"),
        "off_device": Mistake(),
        "hang": Mistake(hint="gather_every_rank"),
        "mismatch": Mistake(hint="gather_every_rank"),
    },
    further=True,
)
