"""Exercises of lesson 02, the process group (`from ddp_helpers.exercises import lesson02`)."""

from __future__ import annotations

import os
from unittest import mock

from ._core import Exercise, Wrong, run_on_ranks
from ._core import progress as _progress

MESSAGES = {
    "backend_hints": [
        "nccl only runs on NVIDIA GPUs; gloo runs on the CPU. Without CUDA, nccl fails at "
        "init_process_group.",
        "nccl needs a GPU of its own for every rank on a machine. Compare the GPUs this "
        "machine has with the ranks this machine runs: LOCAL_WORLD_SIZE, not WORLD_SIZE "
        "(which counts the ranks of every machine).",
        "if torch.cuda.is_available() and torch.cuda.device_count() >= "
        'int(os.environ["LOCAL_WORLD_SIZE"]): return "nccl", else return "gloo".',
    ],
    "backend_case": ("On {machine}, pick_backend() returned {got!r}; it should be {want!r}. {why}"),
    "machine_one": "a machine with {gpus} GPU(s) running {local} rank(s)",
    "machine_many": (
        "{nodes} machines with {gpus} GPU(s) each, {local} ranks per machine "
        "(WORLD_SIZE={world}, LOCAL_WORLD_SIZE={local})"
    ),
    "why_no_cuda": "Without CUDA, nccl fails at init_process_group.",
    "why_too_few": "Two ranks of one machine cannot share a GPU under nccl.",
    "why_enough": "Every rank of this machine has a GPU of its own: nccl is the fast choice.",
    "why_local": (
        "Every rank has a GPU of its own on its machine; the ranks of the other machines "
        "use their own GPUs, so compare with LOCAL_WORLD_SIZE, not WORLD_SIZE."
    ),
    "backend_ok": "Right on {cases} machines: with and without CUDA, one machine and several.",
    "avg_hints": [
        "all_reduce with the default op SUM adds every rank's tensor; DDP averages, so "
        "divide by the world size afterwards (or ask all_reduce for ReduceOp.AVG).",
        "Every rank must make the same collective calls in the same order. A call inside "
        "`if rank == 0:` leaves the other ranks out and the job hangs.",
        "Loop over model.parameters(); skip a parameter whose .grad is None; call "
        "dist.all_reduce(p.grad) on every rank, then p.grad /= dist.get_world_size().",
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


def pick_backend():
    import torch

    gpus_here = torch.cuda.device_count() if torch.cuda.is_available() else 0
    ranks_here = int(os.environ["LOCAL_WORLD_SIZE"])  # ranks on this machine (torchrun)
    return "nccl" if gpus_here >= ranks_here else "gloo"


# (GPUs on each machine, ranks per machine, ranks in all, the right backend, why)
BACKEND_CASES = [
    (0, 2, 2, "gloo", "why_no_cuda"),
    (0, 1, 1, "gloo", "why_no_cuda"),
    (1, 2, 2, "gloo", "why_too_few"),
    (4, 2, 2, "nccl", "why_enough"),
    (2, 2, 2, "nccl", "why_enough"),
    (8, 8, 16, "nccl", "why_local"),
    (4, 8, 16, "gloo", "why_too_few"),
    (2, 2, 4, "nccl", "why_local"),
]


def _check_backend(fn, cases=BACKEND_CASES) -> str:
    import torch

    for gpus, local, world, want, why in cases:
        env = {"LOCAL_WORLD_SIZE": str(local), "WORLD_SIZE": str(world), "LOCAL_RANK": "0"}
        env["RANK"] = "0"
        with (
            mock.patch.object(torch.cuda, "is_available", lambda g=gpus: g > 0),
            mock.patch.object(torch.cuda, "device_count", lambda g=gpus: g),
            mock.patch.dict(os.environ, env),
        ):
            got = fn()
        # str(): dist.Backend.GLOO counts as "gloo"; an object equal to everything does not.
        if str(got) != want:
            nodes = world // local
            machine = MESSAGES["machine_one" if nodes == 1 else "machine_many"].format(
                gpus=gpus, local=local, world=world, nodes=nodes
            )
            hint = 0 if gpus == 0 else 1
            raise Wrong(
                MESSAGES["backend_case"].format(
                    machine=machine, got=got, want=want, why=MESSAGES[why]
                ),
                hint=hint,
            )
    return MESSAGES["backend_ok"].format(cases=len(cases))


def _hidden_backend(fn) -> str:
    # Machines the check does not show: more GPUs than ranks, many machines, one GPU each.
    cases = [(8, 4, 32, "nccl", "why_local"), (3, 4, 8, "gloo", "why_too_few")]
    return _check_backend(fn, cases + [(1, 1, 8, "nccl", "why_local")])


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
    results = run_on_ranks(_average_gradients_harness, fn, nprocs=2, hang_hint=1)
    worst = max(results, key=lambda r: r["diff"])
    if worst["diff"] <= 1e-6:
        return MESSAGES["avg_ok"].format(diff=worst["diff"])
    if all(r["unchanged"] for r in results):
        raise Wrong(MESSAGES["avg_unchanged"], hint=0)
    if abs(worst["ratio"] - 2.0) < 0.05:
        raise Wrong(MESSAGES["avg_sum"].format(ratio=worst["ratio"]), hint=0)
    raise Wrong(MESSAGES["avg_differ"].format(diff=worst["diff"]), hint=0)


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
