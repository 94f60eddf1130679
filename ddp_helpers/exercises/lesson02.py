"""Exercises of lesson 02, the process group (`from ddp_helpers.exercises import lesson02`)."""

from __future__ import annotations

from unittest import mock

from ._core import Exercise, Wrong, run_on_ranks
from ._core import progress as _progress

MESSAGES = {
    "backend_hints": [
        "nccl only runs on NVIDIA GPUs; gloo runs on the CPU (and can also move GPU tensors).",
        "nccl needs one GPU per rank: two ranks cannot share one GPU. Compare "
        "torch.cuda.device_count() with the world size.",
        "if torch.cuda.is_available() and torch.cuda.device_count() >= world_size: "
        "return 'nccl', else return 'gloo'.",
    ],
    "backend_case": (
        "With {gpus} GPU(s) and {w} ranks, pick_backend({w}) returned {got!r}; it should "
        "be {want!r}. {why}"
    ),
    "why_no_cuda": "Without CUDA, nccl fails at init_process_group.",
    "why_too_few": "nccl cannot put two ranks on one GPU.",
    "why_enough": "With a GPU for every rank, nccl is the fast choice.",
    "backend_ok": "Right on {cases} machines, with and without CUDA.",
    "avg_hints": [
        "all_reduce with the default op SUM adds every rank's tensor; DDP averages, so "
        "divide by the world size afterwards.",
        "Loop over model.parameters(); skip a parameter whose .grad is None; call "
        "dist.all_reduce(p.grad) on every rank, then p.grad /= dist.get_world_size().",
        "Every rank must make the same collective calls in the same order. A call inside "
        "`if rank == 0:` leaves the other ranks out and the job hangs.",
    ],
    "avg_sum": (
        "Your gradients are {ratio:.2f} times DDP's: all_reduce sums, so divide by the world "
        "size to get the average DDP uses."
    ),
    "avg_unchanged": (
        "The gradients did not change: each rank still has only its own. all_reduce them "
        "across the ranks."
    ),
    "avg_differ": "Your gradients differ from DDP's by up to {diff:.3g} (allowed: 1e-6).",
    "avg_ok": "Equal to DDP's averaged gradients (max difference {diff:.1e}) on 2 ranks.",
}


def pick_backend(world_size):
    import torch

    if torch.cuda.is_available() and torch.cuda.device_count() >= world_size:
        return "nccl"
    return "gloo"


def _check_backend(fn, cases=None) -> str:
    import torch

    cases = cases or [
        (0, 2, "gloo", "why_no_cuda"),
        (0, 1, "gloo", "why_no_cuda"),
        (1, 2, "gloo", "why_too_few"),
        (4, 2, "nccl", "why_enough"),
        (2, 2, "nccl", "why_enough"),
        (1, 1, "nccl", "why_enough"),
    ]
    for gpus, w, want, why in cases:
        with (
            mock.patch.object(torch.cuda, "is_available", lambda g=gpus: g > 0),
            mock.patch.object(torch.cuda, "device_count", lambda g=gpus: g),
        ):
            got = fn(w)
        # str(): dist.Backend.GLOO counts as "gloo"; an object equal to everything does not.
        if str(got) != want:
            hint = 0 if gpus == 0 else 1
            raise Wrong(
                MESSAGES["backend_case"].format(
                    gpus=gpus, w=w, got=got, want=want, why=MESSAGES[why]
                ),
                hint=hint,
            )
    return MESSAGES["backend_ok"].format(cases=len(cases))


def _hidden_backend(fn) -> str:
    # An 8-GPU machine, and one with fewer GPUs than ranks: cases the check does not show.
    cases = [(8, 8, "nccl", "why_enough"), (8, 4, "nccl", "why_enough")]
    return _check_backend(fn, cases + [(3, 4, "gloo", "why_too_few")])


def average_gradients(model):
    import torch.distributed as dist

    world_size = dist.get_world_size()
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)  # SUM over the ranks ...
            p.grad /= world_size  # ... then divide: the average, as DDP does


def _average_gradients_harness(average_gradients):
    """On each rank: the learner's averaging next to DDP's, on the same data."""
    import copy

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    try:
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
        return {"diff": diff, "ratio": ratio, "unchanged": unchanged}
    finally:
        dist.destroy_process_group()


def _check_average(fn) -> str:
    results = run_on_ranks(_average_gradients_harness, fn, nprocs=2, hang_hint=2)
    worst = max(results, key=lambda r: r["diff"])
    if worst["diff"] <= 1e-6:
        return MESSAGES["avg_ok"].format(diff=worst["diff"])
    if all(r["unchanged"] for r in results):
        raise Wrong(MESSAGES["avg_unchanged"], hint=1)
    if abs(worst["ratio"] - 2.0) < 0.05:
        raise Wrong(MESSAGES["avg_sum"].format(ratio=worst["ratio"]), hint=0)
    raise Wrong(MESSAGES["avg_differ"].format(diff=worst["diff"]), hint=1)


q1 = Exercise(
    "2.1",
    "pick_backend",
    _check_backend,
    MESSAGES["backend_hints"],
    pick_backend,
    hidden=_hidden_backend,
)
q2 = Exercise("2.2", "average_gradients", _check_average, MESSAGES["avg_hints"], average_gradients)
EXERCISES = [q1, q2]


def progress() -> None:
    """Which exercises of lesson 02 pass, checked against this notebook's definitions."""
    _progress(EXERCISES, "02")
