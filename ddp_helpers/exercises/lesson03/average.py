"""3.2 average_gradients: the average DDP takes, by hand, checked against DDP's own."""

from __future__ import annotations

from ...i18n import messages
from .._core import (
    Exercise,
    Mistake,
    Phrase,
    Wrong,
    process_group,
    run_on_ranks,
)
from ..devices import made_off_device

MESSAGES = messages(
    "exercises.lesson03.average",
    {
        "hint.avg_divide": (
            "all_reduce with the default op SUM adds every rank's tensor; DDP averages, so "
            "divide by the world size afterwards (or ask all_reduce for ReduceOp.AVG)."
        ),
        "hint.avg_same_calls": (
            "Every rank must make the same collective calls in the same order. A call "
            "inside `if rank == 0:` leaves the other ranks out and the job hangs."
        ),
        "hint.avg_code": (
            "Loop over model.parameters(); skip a parameter whose .grad is None; call "
            "dist.all_reduce(p.grad) on every rank, then p.grad /= dist.get_world_size()."
        ),
        "avg_sum": (
            "On {ranks} ranks your gradients are {ratio:.2f} times DDP's: all_reduce sums, "
            "so divide by the world size to get the average DDP uses."
        ),
        "avg_sum.title": "summed, not averaged",
        "avg_unchanged": (
            "The gradients did not change: each rank still has only its own. all_reduce "
            "them across the ranks."
        ),
        "avg_unchanged.title": "the gradients were not reduced",
        "avg_local": (
            "On {machines} machines x {local} ranks your gradients are {machines} times "
            "DDP's: they were divided by the ranks of one machine ({local}, "
            "LOCAL_WORLD_SIZE), not by all {ranks} (dist.get_world_size())."
        ),
        "avg_local.title": "divided by one machine's ranks, not the world size",
        "avg_differ": (
            "On {ranks} ranks ({machines} machine(s)) your gradients differ from DDP's by up "
            "to {diff:.3g} (allowed: 1e-6)."
        ),
        "avg_differ.title": "other gradients than DDP's",
        "avg_ok": (
            "Equal to DDP's averaged gradients (max difference {diff:.1e}) on 2 and 3 "
            "ranks and on 2 machines x 2 ranks; every tensor it sent made on the model's "
            "device."
        ),
    },
)


def average_gradients(model):
    import torch.distributed as dist

    world_size = dist.get_world_size()
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)  # SUM over the ranks ...
            p.grad /= world_size  # ... then divide (DDP divides first, then sums)


def _average_gradients_harness(average_gradients):
    """On each rank: the learner's averaging next to DDP's, on the same data."""
    import copy

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    with process_group():
        rank = dist.get_rank()
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
        ddp = DDP(copy.deepcopy(model))
        gen = torch.Generator().manual_seed(100 + rank)
        x, y = torch.randn(16, 4, generator=gen), torch.randn(16, 2, generator=gen)
        torch.nn.functional.mse_loss(model(x), y).backward()
        local = [p.grad.clone() for p in model.parameters()]
        average_gradients(model)
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        mine = torch.cat([p.grad.flatten() for p in model.parameters()])
        theirs = torch.cat([p.grad.flatten() for p in ddp.module.parameters()])
        unchanged = all(
            torch.equal(a, p.grad) for a, p in zip(local, model.parameters(), strict=True)
        )
        diff = (mine - theirs).abs().max().item()
        ratio = (mine.norm() / theirs.norm()).item()
        off_device = made_off_device(average_gradients, model)
        return {"diff": diff, "ratio": ratio, "unchanged": unchanged, "off_device": off_device}


# (ranks, machines): two world sizes on one machine, and 2 machines x 2 ranks, where the
# ranks of one machine (LOCAL_WORLD_SIZE) are not all of them.
AVG_RUNS = ((2, 1), (3, 1), (4, 2))


def _check_average(fn) -> Phrase:
    worst_diff, off_device = 0.0, []
    for ranks, machines in AVG_RUNS:
        results = run_on_ranks(_average_gradients_harness, fn, nprocs=ranks, nnodes=machines)
        worst = max(results, key=lambda r: r["diff"])
        off_device += [r["off_device"] for r in results if r["off_device"]]
        if worst["diff"] <= 1e-6:
            worst_diff = max(worst_diff, worst["diff"])
            continue
        if all(r["unchanged"] for r in results):
            raise Wrong("avg_unchanged")
        if abs(worst["ratio"] - ranks) < 0.05:
            raise Wrong("avg_sum", ratio=worst["ratio"], ranks=ranks)
        if machines > 1 and abs(worst["ratio"] - machines) < 0.05:
            raise Wrong("avg_local", ranks=ranks, machines=machines, local=ranks // machines)
        raise Wrong("avg_differ", diff=worst["diff"], ranks=ranks, machines=machines)
    if off_device:
        raise Wrong("off_device", function="average_gradients", collective=off_device[0])
    return Phrase("avg_ok", diff=worst_diff)


# On the core path, right before DDP does the same: the average by hand, checked against
# DDP's gradients (moved here from lesson 02's Going further, issue 38).
q2 = Exercise(
    "3.2",
    "average_gradients",
    _check_average,
    average_gradients,
    texts=MESSAGES,
    hints=("avg_divide", "avg_same_calls", "avg_code"),
    mistakes={
        "avg_sum": Mistake(hint="avg_divide"),
        "avg_unchanged": Mistake(hint="avg_divide"),
        "avg_differ": Mistake(hint="avg_divide"),
        "avg_local": Mistake(hint="avg_divide"),
        "off_device": Mistake(),
        "hang": Mistake(hint="avg_same_calls"),
        "mismatch": Mistake(hint="avg_same_calls"),
    },
)
