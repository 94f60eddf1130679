"""2.1 pick_backend: nccl where every rank of a machine has a GPU of its own, else gloo."""

from __future__ import annotations

import os
from unittest import mock

from ...i18n import messages
from .._core import Exercise, Mistake, Phrase, Wrong, answers_to
from . import machines
from .machines import _machine_key

MESSAGES = messages(
    "exercises.lesson02.backend",
    {
        "hint.backend_cuda": (
            "nccl only runs on NVIDIA GPUs; gloo runs on the CPU. Without CUDA, nccl fails "
            "at init_process_group."
        ),
        "hint.backend_gpu_per_rank": (
            "nccl needs a GPU of its own for every rank on a machine. Compare the GPUs this "
            "machine has with the ranks this machine runs: LOCAL_WORLD_SIZE, not WORLD_SIZE "
            "(which counts the ranks of every machine)."
        ),
        "hint.backend_code": (
            "if torch.cuda.is_available() and torch.cuda.device_count() >= "
            'int(os.environ["LOCAL_WORLD_SIZE"]): return "nccl", else return "gloo".'
        ),
        "backend_no_cuda": (
            "On {machine}, pick_backend() returned {got!r}; it should be {want!r}. Without "
            "CUDA, nccl fails at init_process_group."
        ),
        "backend_no_cuda.title": "nccl without CUDA",
        "backend_too_few": (
            "On {machine}, pick_backend() returned {got!r}; it should be {want!r}. Two ranks "
            "of one machine cannot share a GPU under nccl."
        ),
        "backend_too_few.title": "nccl with fewer GPUs than ranks on the machine",
        "backend_enough": (
            "On {machine}, pick_backend() returned {got!r}; it should be {want!r}. Every rank "
            "of this machine has a GPU of its own: nccl is the fast choice."
        ),
        "backend_enough.title": "gloo where every rank has a GPU",
        "backend_local": (
            "On {machine}, pick_backend() returned {got!r}; it should be {want!r}. Every rank "
            "has a GPU of its own on its machine; the ranks of the other machines use their "
            "own GPUs, so compare with LOCAL_WORLD_SIZE, not WORLD_SIZE."
        ),
        "backend_local.title": "GPUs compared with WORLD_SIZE, not LOCAL_WORLD_SIZE",
        "backend_ok": (
            "Right on {cases} machines: with and without CUDA, one machine and several."
        ),
    },
)


def pick_backend():
    import torch

    gpus_here = torch.cuda.device_count() if torch.cuda.is_available() else 0
    ranks_here = int(os.environ["LOCAL_WORLD_SIZE"])  # ranks on this machine (torchrun)
    return "nccl" if gpus_here >= ranks_here else "gloo"


# (GPUs on each machine, ranks per machine, ranks in all, the right backend, the mistake
# another answer makes)
BACKEND_CASES = [
    (0, 2, 2, "gloo", "backend_no_cuda"),
    (0, 1, 1, "gloo", "backend_no_cuda"),
    (1, 2, 2, "gloo", "backend_too_few"),
    (4, 2, 2, "nccl", "backend_enough"),
    (2, 2, 2, "nccl", "backend_enough"),
    (8, 8, 16, "nccl", "backend_local"),
    (4, 8, 16, "gloo", "backend_too_few"),
    (2, 2, 4, "nccl", "backend_local"),
]


def _on_machine(fn, gpus: int, local: int, world: int) -> tuple[str, str]:
    """In a rank: fn() as rank 0 of a machine with `gpus` GPUs and `local` ranks, of
    `world` in all; what it returned as str() (dist.Backend.GLOO counts as "gloo") and as
    its repr, both plain text (an object equal to everything is no backend here)."""
    import torch

    from ...launcher.plain import shown

    env = {"LOCAL_WORLD_SIZE": str(local), "WORLD_SIZE": str(world), "LOCAL_RANK": "0"}
    env["RANK"] = "0"
    with (
        mock.patch.object(torch.cuda, "is_available", lambda: gpus > 0),
        mock.patch.object(torch.cuda, "device_count", lambda: gpus),
        mock.patch.dict(os.environ, env),
    ):
        got = fn()
    text = str(got)
    return (str.__str__(text) if isinstance(text, str) else shown(text)), shown(got)


def _check_backend(fn, cases=BACKEND_CASES) -> Phrase:
    from functools import partial

    from ...launcher.plain import Opaque

    machines = [(gpus, local, world) for gpus, local, world, _, _ in cases]
    answers = answers_to(partial(_on_machine, fn), machines)
    for (gpus, local, world, want, mistake), (text, shown) in zip(cases, answers, strict=True):
        if text != want:
            nodes = world // local
            machine = Phrase(
                _machine_key(gpus, nodes),
                gpus=gpus,
                local=local,
                world=world,
                nodes=nodes,
            )
            raise Wrong(mistake, machine=machine, got=Opaque("", shown), want=want)
    return Phrase("backend_ok", cases=len(cases))


def _hidden_backend(fn) -> Phrase:
    # Machines the check does not show: more GPUs than ranks, many machines, one GPU each.
    cases = [(8, 4, 32, "nccl", "backend_local"), (3, 4, 8, "gloo", "backend_too_few")]
    return _check_backend(fn, cases + [(1, 1, 8, "nccl", "backend_local")])


q1 = Exercise(
    "2.1",
    "pick_backend",
    _check_backend,
    pick_backend,
    texts=(MESSAGES, machines.MESSAGES),
    hints=("backend_cuda", "backend_gpu_per_rank", "backend_code"),
    mistakes={
        "backend_no_cuda": Mistake(hint="backend_cuda"),
        "backend_too_few": Mistake(hint="backend_gpu_per_rank"),
        "backend_enough": Mistake(hint="backend_gpu_per_rank"),
        "backend_local": Mistake(hint="backend_gpu_per_rank"),
    },
    hidden=_hidden_backend,
)
