"""Exercises of lesson 01, rank and world size (`from ddp_helpers.exercises import lesson01`)."""

from __future__ import annotations

import math
import os

from .. import i18n
from ..i18n import messages
from ._core import (
    Exercise,
    Mistake,
    Phrase,
    Wrong,
    answers_to,
    call,
    run_answer,
    run_on_ranks,
    sayer,
)
from ._core import progress as _progress

MESSAGES = messages(
    "exercises.lesson01",
    {
        "hint.gpu_per_machine": (
            "GPUs are numbered on each machine separately: every machine has its own cuda:0. "
            "RANK counts across all machines, so on the second machine it is already past "
            "the last GPU number there."
        ),
        "hint.gpu_local_rank": (
            "torchrun (and `launch`) tell each rank its number on its own machine in the "
            "environment variable LOCAL_RANK."
        ),
        "hint.gpu_code": 'return torch.device("cuda", int(os.environ["LOCAL_RANK"]))',
        "gpu_type": (
            "It returned {got} on rank {rank}; return a torch.device such as "
            "torch.device('cuda', 1) (or the string 'cuda:1')."
        ),
        "gpu_type.title": "returned something that is not a device",
        "gpu_no_index": (
            "It returned {got}: without a number every rank uses the current GPU, cuda:0 by "
            "default, and they all pile onto one card. Give each rank its own."
        ),
        "gpu_no_index.title": "cuda without a GPU number",
        "gpu_global": (
            "Rank {rank} is rank {local} on machine {node}, which has GPUs cuda:0 to "
            "cuda:{last}; it returned {got}, which does not exist there."
        ),
        "gpu_global.title": "RANK used where LOCAL_RANK belongs",
        "gpu_node": (
            "Ranks {ranks} on machine {node} all returned {got}: each rank of a machine "
            "needs a GPU of its own."
        ),
        "gpu_node.title": "the ranks of a machine share one GPU",
        "gpu_other": (
            "Rank {rank} (local rank {local} on machine {node}) returned {got}; {want} is its GPU."
        ),
        "gpu_other.title": "another rank's GPU",
        "gpu_ok": (
            "cuda:LOCAL_RANK on every rank of 2 machines x 2 ranks and 3 machines x 2 ranks."
        ),
        "hint.shard_dealt": (
            "DistributedSampler deals items out like cards: rank r gets items r, r + W, "
            "r + 2W, ... where W is the world size. It does not cut the data into blocks."
        ),
        "hint.shard_padding": (
            "Every rank must get the same number of items, ceil(n / W), or the ranks would "
            "run different numbers of steps and wait for each other forever. The sampler "
            "pads the list by repeating items from the start: 10 items on 3 ranks become 12."
        ),
        "hint.shard_code": (
            "Build the padded list [i % n for i in range(total)] with total = ceil(n / W) * "
            "W, then take every W-th item starting at the rank: padded[rank::world_size]."
        ),
        "shard_type": "shard({n}, {rank}, {w}) returned {got!r}; return a list of indices.",
        "shard_type.title": "did not return a list",
        "shard_blocks": (
            "shard({n}, {rank}, {w}) returned {got}, a block of consecutive items. "
            "DistributedSampler gives {want}."
        ),
        "shard_blocks.title": "blocks of consecutive items, not dealt out",
        "shard_length": (
            "shard({n}, {rank}, {w}) returned {count} items but every rank must get "
            "ceil({n} / {w}) = {size}: {want}."
        ),
        "shard_length.title": "shares of different lengths (no padding)",
        "shard_other": (
            "shard({n}, {rank}, {w}) returned {got} but DistributedSampler gives {want}."
        ),
        "shard_other.title": "not DistributedSampler's share",
        "shard_ok": "It matches DistributedSampler for {cases} cases (n up to 17, 1-5 ranks).",
        "hint.reduce_sum": (
            "all_reduce combines the tensors of all ranks (by default it sums them) and "
            "writes the result back into the tensor on every rank, in place."
        ),
        "hint.reduce_before": "Before the call, ranks 0, 1 and 2 hold 1, 2 and 3.",
        "reduce_shape": ("Give one value per rank: a list of 3 numbers (what ranks 0, 1, 2 hold)."),
        "reduce_shape.title": "not one value per rank",
        "reduce_local": (
            "{got} is what each rank held before the call. all_reduce leaves the combined "
            "result on every rank."
        ),
        "reduce_local.title": "what the ranks held before the all_reduce",
        "reduce_other": (
            "{got} is not it. After an all_reduce every rank holds the same value: what all "
            "the ranks held before, summed."
        ),
        "reduce_other.title": "another value",
        "reduce_ok": "Every rank holds 1 + 2 + 3 = 6 after the all_reduce.",
        "hint.gather_all": (
            "all_gather collects one tensor from every rank and gives every rank the whole "
            "collection, in rank order."
        ),
        "hint.gather_each": (
            "Rank r contributes r. Each of the 3 ranks ends with the same list of 3 values."
        ),
        "gather_shape": "Give what each rank holds afterwards: a list of 3 lists, one per rank.",
        "gather_shape.title": "not a list per rank",
        "gather_one": (
            "{got} looks like what one rank ends with, but the question asks what each rank "
            "holds: give a list with one entry per rank."
        ),
        "gather_one.title": "one rank's list, not every rank's",
        "gather_other": (
            "{got} is not it. all_gather collects every rank's tensor, in rank order, and "
            "every rank receives the whole collection."
        ),
        "gather_other.title": "another collection",
        "gather_ok": "Every rank ends with [0, 1, 2].",
        # The GIL cell's timings (Going further), printed beside its finding.
        "gil_serial": "one after another: {seconds:.2f} s (measured)",
        "gil_threads": (
            "two threads:       {seconds:.2f} s (measured), cores busy: {cores:.2f} (measured)"
        ),
        "gil_processes": "two processes:     {seconds:.2f} s (measured)",
        "finding.gil": (
            "Finding: together the two threads used at most about one core's worth of CPU "
            "time, where threads running at once would use two: the GIL let one thread at a "
            "time run Python."
        ),
        "finding.no_gil": (
            "Finding: the two threads used more than one core at once, which the GIL does "
            "not allow (is this a free-threaded Python build?)."
        ),
    },
)
say = sayer(MESSAGES)


def gpu_for_this_rank():
    import torch

    return torch.device("cuda", int(os.environ["LOCAL_RANK"]))


def _gpu_harness(gpu_for_this_rank):
    """In each rank: where the rank really is, read before the answer runs (an answer that
    sets LOCAL_RANK moves nothing), next to its answer as text."""
    keys = ("RANK", "LOCAL_RANK", "GROUP_RANK", "LOCAL_WORLD_SIZE")
    where = {k: int(os.environ[k]) for k in keys}
    return where, _device_name(gpu_for_this_rank())


def _device_name(answer) -> str:
    """'cuda:1' for torch.device('cuda', 1), 'cuda:1' or 1; else the answer's repr (as a
    plain str: its own __repr__ may return a str that says it equals everything)."""
    import torch

    from ..launcher.plain import shown

    if isinstance(answer, bool):
        return shown(answer)
    if isinstance(answer, int):
        return f"cuda:{int.__index__(answer)}"
    if isinstance(answer, str):
        try:
            answer = torch.device(str.__str__(answer))
        except RuntimeError:
            return shown(answer)
    if type(answer) is torch.device:
        return str(answer)
    return shown(answer)


def _check_gpu(fn, layouts=((4, 2), (6, 3))) -> Phrase:
    for nprocs, nnodes in layouts:
        results = run_on_ranks(_gpu_harness, fn, nprocs=nprocs, nnodes=nnodes)
        for env, got in results:
            want = f"cuda:{env['LOCAL_RANK']}"
            if got == want:
                continue
            rank, local, node = env["RANK"], env["LOCAL_RANK"], env["GROUP_RANK"]
            if not got.startswith(("cuda", "cpu")):
                raise Wrong("gpu_type", got=got, rank=rank)
            if got == "cuda":
                raise Wrong("gpu_no_index", got=got)
            if got == f"cuda:{rank}":
                last = env["LOCAL_WORLD_SIZE"] - 1
                raise Wrong("gpu_global", rank=rank, local=local, node=node, last=last, got=got)
            same = [e["RANK"] for e, g in results if e["GROUP_RANK"] == node and g == got]
            if len(same) > 1:
                ranks = i18n.listed(same)
                raise Wrong("gpu_node", ranks=ranks, node=node, got=got)
            raise Wrong("gpu_other", rank=rank, local=local, node=node, got=got, want=want)
    return Phrase("gpu_ok")


def _hidden_gpu(fn) -> Phrase:
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


def _check_shard(fn, grid=None) -> Phrase:
    # The lesson's own example first: its message is the one a learner can picture.
    grid = grid or [(10, 3), (7, 2)] + [
        (n, w) for w in range(1, 6) for n in (1, 2, 3, 5, 12, 16, 17)
    ]
    calls = [(n, rank, w) for n, w in grid for rank in range(w)]
    cases = 0
    for (n, rank, w), got in zip(calls, answers_to(fn, calls), strict=True):
        want = _reference_shard(n, rank, w)
        if not isinstance(got, (list, tuple)):  # what came back is plain data (to_plain)
            raise Wrong("shard_type", n=n, rank=rank, w=w, got=got)
        got = [int(i) for i in got]
        cases += 1
        if got == want:
            continue
        size = math.ceil(n / w)
        args = dict(n=n, rank=rank, w=w, got=got, want=want, count=len(got), size=size)
        if len(got) > 1 and got == list(range(got[0], got[0] + len(got))):
            raise Wrong("shard_blocks", **args)
        if len(got) != size:
            raise Wrong("shard_length", **args)
        raise Wrong("shard_other", **args)
    return Phrase("shard_ok", cases=cases)


def _hidden_shard(fn) -> Phrase:
    # Sizes and world sizes the learner's check never shows (the grader's extra cases).
    return _check_shard(fn, [(n, w) for w in (6, 7, 8) for n in (4, 9, 23, 64, 101)])


def predict_all_reduce():
    return [6, 6, 6]


def _check_reduce(fn) -> Phrase:
    got = run_answer(call, fn)
    if not isinstance(got, (list, tuple)) or len(got) != 3:
        raise Wrong("reduce_shape")
    values = [float(v) for v in got]
    if values == [6.0, 6.0, 6.0]:
        return Phrase("reduce_ok")
    if values == [1.0, 2.0, 3.0]:
        raise Wrong("reduce_local", got=list(got))
    raise Wrong("reduce_other", got=list(got))


def predict_all_gather():
    return [[0, 1, 2], [0, 1, 2], [0, 1, 2]]


def _check_gather(fn) -> Phrase:
    got = run_answer(call, fn)
    if isinstance(got, (list, tuple)) and [*got] in ([0, 1, 2], [0.0, 1.0, 2.0]):
        raise Wrong("gather_one", got=list(got))
    if not isinstance(got, (list, tuple)) or len(got) != 3:
        raise Wrong("gather_shape")
    try:
        values = [[float(v) for v in row] for row in got]
    except TypeError:
        raise Wrong("gather_shape") from None
    if values == [[0.0, 1.0, 2.0]] * 3:
        return Phrase("gather_ok")
    raise Wrong("gather_other", got=list(got))


q1 = Exercise(
    "1.1",
    "gpu_for_this_rank",
    _check_gpu,
    gpu_for_this_rank,
    texts=MESSAGES,
    hints=("gpu_per_machine", "gpu_local_rank", "gpu_code"),
    mistakes={
        "gpu_type": Mistake(hint="gpu_local_rank"),
        "gpu_no_index": Mistake(hint="gpu_local_rank"),
        "gpu_global": Mistake(hint="gpu_per_machine"),
        "gpu_node": Mistake(hint="gpu_local_rank"),
        "gpu_other": Mistake(hint="gpu_local_rank"),
    },
    hidden=_hidden_gpu,
)
q2 = Exercise(
    "1.2",
    "shard",
    _check_shard,
    shard,
    texts=MESSAGES,
    hints=("shard_dealt", "shard_padding", "shard_code"),
    mistakes={
        "shard_type": Mistake(),
        "shard_blocks": Mistake(hint="shard_dealt"),
        "shard_length": Mistake(hint="shard_padding"),
        "shard_other": Mistake(hint="shard_padding"),
    },
    hidden=_hidden_shard,
)
q3 = Exercise(
    "1.3",
    "predict_all_reduce",
    _check_reduce,
    predict_all_reduce,
    texts=MESSAGES,
    hints=("reduce_sum", "reduce_before"),
    mistakes={
        "reduce_shape": Mistake(hint="reduce_sum"),
        "reduce_local": Mistake(hint="reduce_sum"),
        "reduce_other": Mistake(hint="reduce_sum"),
    },
)
q4 = Exercise(
    "1.4",
    "predict_all_gather",
    _check_gather,
    predict_all_gather,
    texts=MESSAGES,
    hints=("gather_all", "gather_each"),
    mistakes={
        "gather_shape": Mistake(hint="gather_all"),
        "gather_one": Mistake(hint="gather_all"),
        "gather_other": Mistake(hint="gather_all"),
    },
)
EXERCISES = [q1, q2, q3, q4]


def progress() -> None:
    """Which exercises of lesson 01 pass, checked against this notebook's definitions."""
    _progress(EXERCISES, "01")
