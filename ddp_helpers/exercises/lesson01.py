"""Exercises of lesson 01, rank and world size (`from ddp_helpers.exercises import lesson01`)."""

from __future__ import annotations

import math
import os

from ._core import Exercise, Wrong, run_on_ranks
from ._core import progress as _progress

MESSAGES = {
    "gpu_hints": [
        "GPUs are numbered on each machine separately: every machine has its own cuda:0. "
        "RANK counts across all machines, so on the second machine it is already past the "
        "last GPU number there.",
        "torchrun (and `launch`) tell each rank its number on its own machine in the "
        "environment variable LOCAL_RANK.",
        'return torch.device("cuda", int(os.environ["LOCAL_RANK"]))',
    ],
    "gpu_type": (
        "It returned {got} on rank {rank}; return a torch.device such as "
        "torch.device('cuda', 1) (or the string 'cuda:1')."
    ),
    "gpu_no_index": (
        "It returned {got}: without a number every rank uses the current GPU, cuda:0 by "
        "default, and they all pile onto one card. Give each rank its own."
    ),
    "gpu_global": (
        "Rank {rank} is rank {local} on machine {node}, which has GPUs cuda:0 to "
        "cuda:{last}; it returned {got}, which does not exist there."
    ),
    "gpu_node": (
        "Ranks {ranks} on machine {node} all returned {got}: each rank of a machine needs a "
        "GPU of its own."
    ),
    "gpu_other": (
        "Rank {rank} (local rank {local} on machine {node}) returned {got}; {want} is its GPU."
    ),
    "gpu_ok": "cuda:LOCAL_RANK on every rank of 2 machines x 2 ranks and 3 machines x 2 ranks.",
    "shard_hints": [
        "DistributedSampler deals items out like cards: rank r gets items r, r + W, "
        "r + 2W, ... where W is the world size. It does not cut the data into blocks.",
        "Every rank must get the same number of items, ceil(n / W), or the ranks would run "
        "different numbers of steps and wait for each other forever. The sampler pads the "
        "list by repeating items from the start: 10 items on 3 ranks become 12.",
        "Build the padded list [i % n for i in range(total)] with total = ceil(n / W) * W, "
        "then take every W-th item starting at the rank: padded[rank::world_size].",
    ],
    "shard_type": "shard({n}, {rank}, {w}) returned {got!r}; return a list of indices.",
    "shard_blocks": (
        "shard({n}, {rank}, {w}) returned {got}, a block of consecutive items. "
        "DistributedSampler gives {want}."
    ),
    "shard_length": (
        "shard({n}, {rank}, {w}) returned {count} items but every rank must get "
        "ceil({n} / {w}) = {size}: {want}."
    ),
    "shard_other": "shard({n}, {rank}, {w}) returned {got} but DistributedSampler gives {want}.",
    "shard_ok": "It matches DistributedSampler for {cases} cases (n up to 17, 1-5 ranks).",
    "reduce_hints": [
        "all_reduce combines the tensors of all ranks (by default it sums them) and writes "
        "the result back into the tensor on every rank, in place.",
        "Before the call, ranks 0, 1 and 2 hold 1, 2 and 3.",
    ],
    "reduce_shape": "Give one value per rank: a list of 3 numbers (what ranks 0, 1, 2 hold).",
    "reduce_local": (
        "{got} is what each rank held before the call. all_reduce leaves the combined "
        "result on every rank."
    ),
    "reduce_other": (
        "{got} is not it. After an all_reduce every rank holds the same value: what all "
        "the ranks held before, summed."
    ),
    "reduce_ok": "Every rank holds 1 + 2 + 3 = 6 after the all_reduce.",
    "gather_hints": [
        "all_gather collects one tensor from every rank and gives every rank the whole "
        "collection, in rank order.",
        "Rank r contributes r. Each of the 3 ranks ends with the same list of 3 values.",
    ],
    "gather_shape": ("Give what each rank holds afterwards: a list of 3 lists, one per rank."),
    "gather_one": (
        "{got} looks like what one rank ends with, but the question asks what each rank "
        "holds: give a list with one entry per rank."
    ),
    "gather_other": (
        "{got} is not it. all_gather collects every rank's tensor, in rank order, and every "
        "rank receives the whole collection."
    ),
    "gather_ok": "Every rank ends with [0, 1, 2].",
}


def gpu_for_this_rank():
    import torch

    return torch.device("cuda", int(os.environ["LOCAL_RANK"]))


def _gpu_harness(gpu_for_this_rank):
    """In each rank: its answer, as text, next to where the rank really is."""
    answer = gpu_for_this_rank()
    keys = ("RANK", "LOCAL_RANK", "GROUP_RANK", "LOCAL_WORLD_SIZE")
    return {k: int(os.environ[k]) for k in keys}, _device_name(answer)


def _device_name(answer):
    """'cuda:1' for torch.device('cuda', 1), 'cuda:1' or 1; else the answer's repr."""
    import torch

    if isinstance(answer, bool):
        return repr(answer)
    if isinstance(answer, int):
        return f"cuda:{answer}"
    if isinstance(answer, str):
        try:
            answer = torch.device(answer)
        except RuntimeError:
            return repr(answer)
    if isinstance(answer, torch.device):
        return str(answer)
    return repr(answer)


def _check_gpu(fn, layouts=((4, 2), (6, 3))) -> str:
    for nprocs, nnodes in layouts:
        results = run_on_ranks(_gpu_harness, fn, nprocs=nprocs, nnodes=nnodes)
        for env, got in results:
            want = f"cuda:{env['LOCAL_RANK']}"
            if got == want:
                continue
            rank, local, node = env["RANK"], env["LOCAL_RANK"], env["GROUP_RANK"]
            if not got.startswith(("cuda", "cpu")):
                raise Wrong(MESSAGES["gpu_type"].format(got=got, rank=rank), hint=1)
            if got == "cuda":
                raise Wrong(MESSAGES["gpu_no_index"].format(got=got), hint=1)
            if got == f"cuda:{rank}":
                last = env["LOCAL_WORLD_SIZE"] - 1
                args = dict(rank=rank, local=local, node=node, last=last, got=got)
                raise Wrong(MESSAGES["gpu_global"].format(**args), hint=0)
            same = [e["RANK"] for e, g in results if e["GROUP_RANK"] == node and g == got]
            if len(same) > 1:
                ranks = ", ".join(map(str, same))
                raise Wrong(MESSAGES["gpu_node"].format(ranks=ranks, node=node, got=got), hint=1)
            args = dict(rank=rank, local=local, node=node, got=got, want=want)
            raise Wrong(MESSAGES["gpu_other"].format(**args), hint=1)
    return MESSAGES["gpu_ok"]


def _hidden_gpu(fn) -> str:
    # Eight ranks on two machines, and one machine: layouts the check does not show.
    return _check_gpu(fn, ((8, 2), (2, 1)))


def _reference_shard(n: int, rank: int, world_size: int) -> list[int]:
    from torch.utils.data.distributed import DistributedSampler

    sampler = DistributedSampler(range(n), num_replicas=world_size, rank=rank, shuffle=False)
    return list(sampler)


def shard(n, rank, world_size):
    total = math.ceil(n / world_size) * world_size
    padded = [i % n for i in range(total)]  # repeat items from the start to pad
    return padded[rank::world_size]


def _check_shard(fn, grid=None) -> str:
    cases = 0
    # The lesson's own example first: its message is the one a learner can picture.
    grid = grid or [(10, 3), (7, 2)] + [
        (n, w) for w in range(1, 6) for n in (1, 2, 3, 5, 12, 16, 17)
    ]
    for n, w in grid:
        for rank in range(w):
            want = _reference_shard(n, rank, w)
            got = fn(n, rank, w)
            if not isinstance(got, (list, tuple, range)):
                raise Wrong(MESSAGES["shard_type"].format(n=n, rank=rank, w=w, got=got))
            got = [int(i) for i in got]
            cases += 1
            if got == want:
                continue
            size = math.ceil(n / w)
            args = dict(n=n, rank=rank, w=w, got=got, want=want, count=len(got), size=size)
            if len(got) > 1 and got == list(range(got[0], got[0] + len(got))):
                raise Wrong(MESSAGES["shard_blocks"].format(**args), hint=0)
            if len(got) != size:
                raise Wrong(MESSAGES["shard_length"].format(**args), hint=1)
            raise Wrong(MESSAGES["shard_other"].format(**args), hint=1)
    return MESSAGES["shard_ok"].format(cases=cases)


def _hidden_shard(fn) -> str:
    # Sizes and world sizes the learner's check never shows (the grader's extra cases).
    return _check_shard(fn, [(n, w) for w in (6, 7, 8) for n in (4, 9, 23, 64, 101)])


def predict_all_reduce():
    return [6, 6, 6]


def _check_reduce(fn) -> str:
    got = fn()
    if not isinstance(got, (list, tuple)) or len(got) != 3:
        raise Wrong(MESSAGES["reduce_shape"], hint=0)
    values = [float(v) for v in got]
    if values == [6.0, 6.0, 6.0]:
        return MESSAGES["reduce_ok"]
    if values == [1.0, 2.0, 3.0]:
        raise Wrong(MESSAGES["reduce_local"].format(got=list(got)), hint=0)
    raise Wrong(MESSAGES["reduce_other"].format(got=list(got)), hint=0)


def predict_all_gather():
    return [[0, 1, 2], [0, 1, 2], [0, 1, 2]]


def _check_gather(fn) -> str:
    got = fn()
    if isinstance(got, (list, tuple)) and [*got] in ([0, 1, 2], [0.0, 1.0, 2.0]):
        raise Wrong(MESSAGES["gather_one"].format(got=list(got)), hint=0)
    if not isinstance(got, (list, tuple)) or len(got) != 3:
        raise Wrong(MESSAGES["gather_shape"], hint=0)
    try:
        values = [[float(v) for v in row] for row in got]
    except TypeError:
        raise Wrong(MESSAGES["gather_shape"], hint=0) from None
    if values == [[0.0, 1.0, 2.0]] * 3:
        return MESSAGES["gather_ok"]
    raise Wrong(MESSAGES["gather_other"].format(got=list(got)), hint=0)


q1 = Exercise(
    "1.1",
    "gpu_for_this_rank",
    _check_gpu,
    MESSAGES["gpu_hints"],
    gpu_for_this_rank,
    hidden=_hidden_gpu,
)
q2 = Exercise("1.2", "shard", _check_shard, MESSAGES["shard_hints"], shard, hidden=_hidden_shard)
q3 = Exercise(
    "1.3", "predict_all_reduce", _check_reduce, MESSAGES["reduce_hints"], predict_all_reduce
)
q4 = Exercise(
    "1.4", "predict_all_gather", _check_gather, MESSAGES["gather_hints"], predict_all_gather
)
EXERCISES = [q1, q2, q3, q4]


def progress() -> None:
    """Which exercises of lesson 01 pass, checked against this notebook's definitions."""
    _progress(EXERCISES, "01")
