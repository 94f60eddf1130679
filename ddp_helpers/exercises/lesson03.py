"""Exercises of lesson 03, wrapping the model (`from ddp_helpers.exercises import lesson03`)."""

from __future__ import annotations

from ._core import Exercise, Wrong, run_on_ranks
from ._core import progress as _progress

MESSAGES = {
    "sync_hints": [
        "Looking at this rank's own copy tells you nothing about the other ranks: you have "
        "to communicate. Broadcast rank 0's copy of each tensor and compare, or all_gather "
        "them.",
        "Every tensor that can differ counts: every parameter (weights and biases, the last "
        "one too) and every buffer (BatchNorm's running statistics, model.buffers()).",
        "Every rank must return the same answer. Count the differences on each rank, then "
        "all_reduce that count so every rank sees the total.",
        "For each t in [*model.parameters(), *model.buffers()]: broadcast a clone from rank "
        "0 and add (clone != t).sum() to a counter on the model's device; all_reduce the "
        "counter; return counter.item() == 0.",
    ],
    "sync_before": (
        "Before wrapping, the ranks' models were built with different seeds, yet "
        "params_in_sync returned True on rank {rank}."
    ),
    "sync_wrap": (
        "Right after DDP(model) every rank holds rank 0's weights and buffers (DDP broadcasts "
        "them), but params_in_sync returned False on rank {rank}."
    ),
    "sync_local": (
        "After rank 1 changed its copy, params_in_sync still returned True on rank {rank} "
        "every time: it must compare with the other ranks, not only look at its own copy."
    ),
    "sync_missed": (
        "After rank 1 changed {what}, params_in_sync still returned True on rank {rank}: "
        "a difference anywhere in the model counts."
    ),
    "sync_disagree": (
        "The ranks disagree ({cases}; per rank): {answers}. Every rank must return the same answer."
    ),
    "sync_ok": (
        "False before wrapping, True after, False after rank 1 changed a weight, a bias, the "
        "last parameter or a buffer; the same answer on every rank."
    ),
    "shard_hints": [
        "Each rank takes its own rows of the global batch: with 2 ranks and 8 rows, 4 each, "
        "no row twice and none left out.",
        "Slice x and y the same way, so each input keeps its own target.",
        "x[rank::world_size] (every W-th row) or x.chunk(world_size)[rank] (a block) both "
        "work: DDP only needs the parts to be disjoint and to cover the batch.",
    ],
    "shard_whole": (
        "Rank {rank} trained on all {batch} rows: each rank must take only its own "
        "{part} rows, or the ranks repeat each other's work."
    ),
    "shard_overlap": "Rows {rows} went to more than one rank; each row belongs to one rank.",
    "shard_missing": "Rows {rows} went to no rank; together the ranks must cover the batch.",
    "shard_pairs": "The inputs and targets were not sliced the same way on rank {rank}.",
    "shard_differ": (
        "After 20 steps the DDP weights differ from one process with the whole batch by "
        "{diff:.3g} (allowed: 1e-6)."
    ),
    "shard_ok": (
        "After 20 SGD steps, 2 ranks with 4 rows each end with the weights of one process "
        "with 8 rows: max |dW| = {diff:.1e}."
    ),
    "ratio_hints": [
        "DDP averages the ranks' gradients. With a summed loss each rank's gradient is the "
        "sum over its own rows only.",
        "One process, summed loss over all B rows: gradient G. Two ranks, each summing over "
        "B/2 rows, averaged by DDP: (G1 + G2) / 2 = G / 2.",
    ],
    "ratio_inverse": (
        "The other way round: DDP divides the summed gradients by the number of ranks, "
        "so its update is smaller."
    ),
    "ratio_other": (
        "{got} is not it. With a summed loss, each rank's gradient sums over its own rows; "
        "what does DDP then do with the ranks' gradients, and how does that compare with "
        "one process summing over all rows?"
    ),
    "ratio_ok": "DDP's update is 1 / world_size = 0.5 of the single-process one.",
}


def params_in_sync(model):
    import torch
    import torch.distributed as dist

    tensors = [*model.parameters(), *model.buffers()]  # buffers: BatchNorm's statistics
    differ = torch.zeros(1, device=tensors[0].device)  # on the model's device, for nccl
    for t in tensors:
        rank0 = t.detach().clone()
        dist.broadcast(rank0, src=0)  # every rank gets rank 0's copy
        differ += (rank0 != t).sum()
    dist.all_reduce(differ)  # so that every rank gives the same answer
    return differ.item() == 0


# What rank 1 changes in its copy after wrapping, one at a time: (what, tensor name).
SYNC_CHANGES = [
    ("the first weight", "0.weight"),
    ("a bias in the middle", "1.bias"),
    ("the last parameter", "3.bias"),
    ("a buffer (BatchNorm's running mean)", "1.running_mean"),
]


def _sync_model():
    import torch

    return torch.nn.Sequential(
        torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3), torch.nn.Tanh(), torch.nn.Linear(3, 2)
    )


def _params_in_sync_harness(params_in_sync):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    try:
        torch.manual_seed(dist.get_rank())  # a different start on every rank
        model = _sync_model()
        answers = {"before": bool(params_in_sync(model))}
        ddp = DDP(model)
        answers["after wrapping"] = bool(params_in_sync(ddp))
        state = ddp.module.state_dict()
        for what, name in SYNC_CHANGES:
            saved = state[name].clone()
            if dist.get_rank() == 1:
                with torch.no_grad():
                    state[name].view(-1)[-1] += 0.5
            answers[what] = bool(params_in_sync(ddp))
            with torch.no_grad():
                state[name].copy_(saved)
        return answers
    finally:
        dist.destroy_process_group()


def _check_sync(fn) -> str:
    answers = run_on_ranks(_params_in_sync_harness, fn, nprocs=2, hang_hint=2)
    if answers[0] != answers[1]:
        cases = ", ".join(answers[0])
        table = [list(a.values()) for a in answers]
        raise Wrong(MESSAGES["sync_disagree"].format(cases=cases, answers=table), hint=2)
    for rank, got in enumerate(answers):
        if not got["after wrapping"]:
            raise Wrong(MESSAGES["sync_wrap"].format(rank=rank), hint=1)
        missed = [what for what, _ in SYNC_CHANGES if got[what]]
        if len(missed) == len(SYNC_CHANGES):
            raise Wrong(MESSAGES["sync_local"].format(rank=rank), hint=0)
        if missed:
            raise Wrong(MESSAGES["sync_missed"].format(what=missed[0], rank=rank), hint=1)
        if got["before"]:
            raise Wrong(MESSAGES["sync_before"].format(rank=rank), hint=0)
    return MESSAGES["sync_ok"]


def shard_batch(x, y, rank, world_size):
    return x[rank::world_size], y[rank::world_size]


STEPS, BATCH, LR = 20, 8, 0.1


def make_model():
    """The small regression model of lessons 03 and 04 (seeded, so every run agrees)."""
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def make_batches(steps=STEPS, batch=BATCH):
    """`steps` batches of `batch` rows: inputs (steps, batch, 8) and targets (steps, batch, 1)."""
    import torch

    gen = torch.Generator().manual_seed(1)
    x = torch.randn(steps, batch, 8, generator=gen)
    return x, x.sum(-1, keepdim=True).sin() + 0.1 * torch.randn(steps, batch, 1, generator=gen)


def train_one_process(steps=STEPS):
    """The reference: one process, the whole batch each step, mean loss, plain SGD."""
    import torch

    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    xs, ys = make_batches(steps)
    for x, y in zip(xs, ys, strict=True):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _shard_batch_harness(shard_batch):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        ids = torch.arange(BATCH)
        id_x, id_y = shard_batch(ids, ids * 10, rank, world)
        model = DDP(make_model())
        opt = torch.optim.SGD(model.parameters(), lr=LR)
        xs, ys = make_batches()
        for x, y in zip(xs, ys, strict=True):
            part_x, part_y = shard_batch(x, y, rank, world)
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(part_x), part_y).backward()
            opt.step()
        weights = {k: v.detach().clone() for k, v in model.module.state_dict().items()}
        return {"ids": id_x.tolist(), "id_targets": (id_y // 10).tolist(), "weights": weights}
    finally:
        dist.destroy_process_group()


def _check_shard_batch(fn) -> str:
    results = run_on_ranks(_shard_batch_harness, fn, nprocs=2, hang_hint=0)
    for rank, r in enumerate(results):
        if len(r["ids"]) == BATCH:
            raise Wrong(
                MESSAGES["shard_whole"].format(rank=rank, batch=BATCH, part=BATCH // 2), hint=0
            )
        if r["ids"] != r["id_targets"]:
            raise Wrong(MESSAGES["shard_pairs"].format(rank=rank), hint=1)
    seen = [i for r in results for i in r["ids"]]
    twice = sorted({i for i in seen if seen.count(i) > 1})
    if twice:
        raise Wrong(MESSAGES["shard_overlap"].format(rows=twice), hint=0)
    missing = sorted(set(range(BATCH)) - set(seen))
    if missing:
        raise Wrong(MESSAGES["shard_missing"].format(rows=missing), hint=0)
    reference = train_one_process()
    diff = max(
        (r["weights"][k] - reference[k]).abs().max().item() for r in results for k in reference
    )
    if diff > 1e-6:
        raise Wrong(MESSAGES["shard_differ"].format(diff=diff), hint=0)
    return MESSAGES["shard_ok"].format(diff=diff)


def predict_summed_loss_ratio():
    return 0.5


def _check_ratio(fn) -> str:
    got = float(fn())
    if abs(got - 0.5) < 1e-6:
        return MESSAGES["ratio_ok"]
    if abs(got - 2.0) < 1e-6:
        raise Wrong(MESSAGES["ratio_inverse"], hint=0)
    raise Wrong(MESSAGES["ratio_other"].format(got=got), hint=0)


q1 = Exercise("3.1", "params_in_sync", _check_sync, MESSAGES["sync_hints"], params_in_sync)
q2 = Exercise("3.2", "shard_batch", _check_shard_batch, MESSAGES["shard_hints"], shard_batch)
q3 = Exercise(
    "3.3",
    "predict_summed_loss_ratio",
    _check_ratio,
    MESSAGES["ratio_hints"],
    predict_summed_loss_ratio,
)
EXERCISES = [q1, q2, q3]


def progress() -> None:
    """Which exercises of lesson 03 pass, checked against this notebook's definitions."""
    _progress(EXERCISES, "03")
