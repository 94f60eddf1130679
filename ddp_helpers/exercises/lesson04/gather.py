"""4.7 gather_all (Going further): all_gather of values of different lengths."""

from __future__ import annotations

import functools
import inspect

from ...i18n import messages
from ..devices import made_off_device
from ..kit import (
    Exercise,
    Mistake,
    Phrase,
    Wrong,
    and_list,
    process_group,
    rank_mistakes,
    run_on_ranks,
)
from ..races import unwaited, waits_required
from ..space import CHECK_SEED, Space, on_hidden_seeds, trying

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
        "hint.gather_own_dtype": (
            "Keep the values' dtype all the way: pad with values.new_zeros(...) (their dtype "
            "and device), gather that, and convert nothing. float32 holds integers exactly "
            "only up to 2**24 and float64 up to 2**53, and float32 keeps about 7 digits of a "
            "float64."
        ),
        "hint.gather_wait": (
            "dist.all_gather(..., async_op=True) returns at once, before the parts are in "
            "the list: keep the work it returns and call work.wait() before you read them "
            "(or leave async_op out)."
        ),
        "gather_not_waited": (
            "{count} all_gather(..., async_op=True) call(s) were never waited for: the parts "
            "land in the list only after work.wait(), so what you read was the list as you "
            "made it (here the check makes that certain; on a real run it depends on timing)."
        ),
        "gather_not_waited.title": "an async all_gather never waited for",
        "gather_rounded": (
            "On {ranks} ranks, rank {rank}'s value {sent} came back as {got}: the values went "
            "through {via} on the way and back to {dtype}, and {via} does not hold them "
            "exactly. Gather them in their own dtype."
        ),
        "gather_rounded.title": "the values rounded through another dtype",
        "gather_values": (
            "On {ranks} ranks, rank {rank}'s value {sent} came back as {got}: as many values "
            "as the ranks hold came back, but not theirs."
        ),
        "gather_values.title": "other values than the ranks hold",
        "gather_ok": (
            "Every rank returned every rank's values, in rank order and in their own dtype "
            "(float32, float64, and int64 past 2**53), on 2 and 3 ranks and on 2 machines x "
            "2 ranks, with shares of {shortest} to {longest} values, the answer called twice "
            "in one process; every tensor it sent was made on the values' device."
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


# (ranks, machines): 3 ranks, 2, and 2 machines x 2 ranks (where LOCAL_WORLD_SIZE is not the
# world size). Each run calls the answer twice in one process, each call with its own
# lengths and dtype (_draws): shares from none to past any small capacity, uneven.
GATHER_RUNS = ((3, 1), (2, 1), (4, 2))
LENGTHS = (5, 0, 13, 3, 9, 1, 17, 4)  # drawn from, in turn: none equal, one past 16
DTYPES = ("float32", "int64", "float64")
HANG = 20  # s: a run takes 0.2 s here; the probe gives up after 5 (devices.PROBE_TIMEOUT)
SPACE = Space(
    drawn={
        "world": (2, 3, 4),
        "machines": (1, 2),
        "calls": (2,),
        "dtypes": DTYPES,
        "lengths": LENGTHS,
        "device": ("cpu", "the default device moved off the values' (off_device)"),
    },
    why_not={
        "steps": "gather_all runs no loop of its own and keeps nothing between calls: it is "
        "called twice in one process (calls)",
        "counts": "gather_all(values) is given no count: how many values each rank holds is "
        "drawn (lengths)",
        "model": "it is given a tensor of values, no model",
    },
)


def _draws(seed: int) -> list[tuple[int, int, list]]:
    """(ranks, machines, [(each rank's number of values, dtype) for each call]) of each run:
    the lengths taken in turn from LENGTHS, from a place the seed moves."""
    runs, place = [], 3 * seed
    for i, (ranks, machines) in enumerate(GATHER_RUNS):
        calls = []
        for call in range(2):
            lengths = tuple(LENGTHS[(place + r) % len(LENGTHS)] for r in range(ranks))
            calls.append((lengths, DTYPES[(i + call + seed) % len(DTYPES)]))
            place += ranks
        runs.append((ranks, machines, calls))
    return runs


def _gather_values(rank: int, lengths, dtype: str):
    """Rank `rank`'s values: each tells its place in the whole, and only its own dtype holds
    it exactly (int64 past 2**53, float64 with more digits than float32 keeps). The first
    is a real 0, so an answer that drops the padding by its value (zeros) loses it."""
    import torch

    start = sum(lengths[:rank])
    place = torch.arange(start, start + lengths[rank], dtype=torch.int64)
    if dtype == "int64":
        return place * (2**53 + 1)
    if dtype == "float64":
        return place.double() / 10
    return (place * 10).float()


class _SizesDiffer(Exception):
    """all_gather called with tensors of different sizes on different ranks."""


# The all_gathers of one tensor per rank, and which argument holds this rank's.
_GATHERS = {
    "all_gather": "tensor",
    "all_gather_into_tensor": "input_tensor",
    "all_gather_single": "input_tensor",
}


def _spy_on_all_gather():
    """Before each all_gather (or all_gather_into_tensor, all_gather_single), compare the
    ranks' sizes: unequal, every rank raises alike (gloo itself would abort one rank or hang
    the others)."""
    import torch
    import torch.distributed as dist

    real = {name: getattr(dist, name) for name in _GATHERS if hasattr(dist, name)}

    def same_sizes(tensor) -> None:
        size = torch.tensor([tensor.numel()], device=tensor.device)
        sizes = [torch.zeros_like(size) for _ in range(dist.get_world_size())]
        real["all_gather"](sizes, size)
        if len({int(n) for n in sizes}) > 1:
            raise _SizesDiffer([int(n) for n in sizes])

    def spied(name, collective):
        signature = inspect.signature(collective)

        @functools.wraps(collective)  # its signature too: races.waits_required reads it
        def gather(*args, **kwargs):
            same_sizes(signature.bind(*args, **kwargs).arguments[_GATHERS[name]])
            return collective(*args, **kwargs)

        return gather

    for name, collective in real.items():
        setattr(dist, name, spied(name, collective))

    def restore() -> None:
        for name, collective in real.items():
            setattr(dist, name, collective)

    return restore


def _returned(got) -> dict:
    """What one call returned, as the check judges it."""
    import torch

    if not isinstance(got, torch.Tensor):
        return {"returned": type(got).__name__}
    if got.dim() != 1:
        return {"shape": list(got.shape)}
    return {"values": got.tolist(), "dtype": str(got.dtype).removeprefix("torch.")}


def _gather_harness(fn, calls):
    """On each rank: the answer called once per (lengths, dtype) of `calls`, in one process,
    an async collective's result landing only where it waits for it (races.py); then the
    off-device probe on the last call's values."""
    import torch.distributed as dist

    with process_group():
        rank, records = dist.get_rank(), []
        restore = _spy_on_all_gather()
        try:
            for lengths, dtype in calls:
                with waits_required() as works:
                    try:
                        got = fn(_gather_values(rank, lengths, dtype))
                    except _SizesDiffer as exc:
                        records.append({"sizes": exc.args[0]})
                        return records
                records.append({**_returned(got), "unwaited": unwaited(works)})
                if "values" not in records[-1]:
                    return records
        finally:
            restore()  # the probe sees torch's own all_gather, with its group and timeout
        records[-1]["off_device"] = made_off_device(fn, _gather_values(rank, *calls[-1]))
        return records


def _check_gather(fn, seed: int = CHECK_SEED) -> Phrase:
    off_device, shares = [], set()
    for ranks, machines, calls in _draws(seed):
        with trying(ranks=ranks, machines=machines):
            runs = run_on_ranks(
                _gather_harness, fn, calls, nprocs=ranks, nnodes=machines, timeout=HANG
            )
            for call, (lengths, dtype) in enumerate(calls):
                with trying(call=call + 1, dtype=dtype, lengths=and_list(lengths)):
                    _judge_call([run[call] for run in runs], ranks, lengths, dtype)
                shares |= set(lengths)
            off_device += [run[-1]["off_device"] for run in runs if run[-1].get("off_device")]
    if off_device:  # after every case: what the answer computes wrong is named first
        raise Wrong("off_device", function="gather_all", collective=off_device[0])
    return Phrase("gather_ok", shortest=min(shares), longest=max(shares))


def _judge_call(records: list[dict], ranks: int, lengths, dtype: str) -> None:
    """One call on every rank: the Wrong that names what is off, if anything is."""
    import torch

    shown = and_list(lengths)
    for record in records:
        if record.get("unwaited"):
            raise Wrong("gather_not_waited", count=record["unwaited"])
        if "sizes" in record:
            raise Wrong("gather_sizes", ranks=ranks, lengths=shown, sizes=and_list(record["sizes"]))
        if "returned" in record:
            raise Wrong("gather_not_tensor", got=record["returned"])
        if "shape" in record:
            raise Wrong("gather_shape", shape=tuple(record["shape"]))
    for rank, record in enumerate(records[1:], 1):
        if record != records[0]:
            raise Wrong("gather_disagree", ranks=ranks, rank=rank)
    want = torch.cat([_gather_values(r, lengths, dtype) for r in range(ranks)]).tolist()
    got = records[0]["values"]
    count = {"ranks": ranks, "lengths": shown, "rank": 0, "got": len(got), "want": len(want)}
    if len(got) != len(want):
        padded = len(got) == ranks * max(lengths)
        raise Wrong("gather_padding" if padded else "gather_count", **count)
    if records[0]["dtype"] != dtype:
        raise Wrong("gather_dtype", got=records[0]["dtype"], want=dtype)
    if got != want:
        _name_values(got, want, ranks, lengths, dtype)


def _name_values(got: list, want: list, ranks: int, lengths, dtype: str) -> None:
    """As many values as the ranks hold, in their dtype, but not theirs: in another order,
    rounded on the way, or others."""
    import torch

    if sorted(got) == sorted(want):
        raise Wrong("gather_order", ranks=ranks)
    at = next(i for i, (g, w) in enumerate(zip(got, want, strict=True)) if g != w)
    owner = next(r for r in range(ranks) if at < sum(lengths[: r + 1]))
    where = {"ranks": ranks, "rank": owner, "sent": want[at], "got": got[at]}
    exact = torch.tensor(want, dtype=getattr(torch, dtype))
    for via in ("float64", "float32"):
        if via != dtype and exact.to(getattr(torch, via)).to(exact.dtype).tolist() == got:
            raise Wrong("gather_rounded", via=via, dtype=dtype, **where)
    raise Wrong("gather_values", **where)


exercise = Exercise(
    "4.7",
    "gather_all",
    _check_gather,
    gather_all,
    texts=MESSAGES,
    hints=("gather_pad", "gather_every_rank", "gather_own_dtype", "gather_wait", "gather_code"),
    mistakes={
        "gather_not_waited": Mistake(hint="gather_wait"),
        "gather_rounded": Mistake(hint="gather_own_dtype"),
        "gather_values": Mistake(hint="gather_pad"),
        "gather_sizes": Mistake(hint="gather_pad"),
        "gather_padding": Mistake(hint="gather_pad"),
        "gather_count": Mistake(hint="gather_pad"),
        "gather_disagree": Mistake(hint="gather_every_rank"),
        "gather_order": Mistake(hint="gather_every_rank"),
        "gather_dtype": Mistake(hint="gather_own_dtype"),
        "gather_not_tensor": Mistake(hint="gather_pad"),
        "gather_shape": Mistake(hint="gather_every_rank"),
        "off_device": Mistake(),
        **rank_mistakes(hint="gather_every_rank"),
    },
    hidden=on_hidden_seeds(_check_gather),
    space=SPACE,
    hang_timeout=HANG,
    further=True,
)
