"""2.1 pick_backend: nccl where every rank of a machine has a GPU of its own, else gloo."""

from __future__ import annotations

import os
from unittest import mock

from ...i18n import messages
from ...launcher.plain import Opaque, shown
from ..kit import Exercise, Mistake, Phrase, Wrong, run_on_ranks
from ..lesson01.gpu import layout_env
from ..space import CHECK_SEED, HIDDEN_SEEDS, Space, on_hidden_seeds, trying
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
        "backend_other": (
            "On {machine}, pick_backend() returned {got}, which is not a backend: return "
            '"nccl" or "gloo" (init_process_group takes the backend\'s name; the device '
            "comes later)."
        ),
        "backend_other.title": "not a backend's name",
        "backend_ranks_differ": (
            "On {machine}, pick_backend() returned {got!r} as local rank {local} and {other!r} "
            "as local rank {other_local}: the ranks of one machine would start different "
            "backends, and init_process_group would never finish. The backend is the "
            "machine's choice: its GPUs against its ranks, the same on every rank."
        ),
        "backend_ranks_differ.title": "ranks of one machine pick different backends",
        "backend_kept": (
            "On {machine}, pick_backend() returned {got!r} in one process and {other!r} in "
            "another, in the same environment; the two had been called on other machines "
            "before, in other orders. What it returns depends on an earlier call, not only on "
            "this machine: here it should be {want!r}. Look at the GPUs and LOCAL_WORLD_SIZE "
            "on every call, and keep nothing from an earlier one."
        ),
        "backend_kept.title": "depends on an earlier call",
        "backend_ok": (
            "Right on {cases} machines (with and without CUDA, too few GPUs and enough, one "
            "machine and several), as the first and the last rank of each, called {calls} "
            "times in each of 2 processes, in other orders."
        ),
    },
)


def pick_backend():
    import torch

    gpus_here = torch.cuda.device_count() if torch.cuda.is_available() else 0
    ranks_here = int(os.environ["LOCAL_WORLD_SIZE"])  # ranks on this machine (torchrun)
    return "nccl" if gpus_here >= ranks_here else "gloo"


# Pretend machines, by seed: (GPUs on each machine, nodes, ranks per machine). Each is
# tried as its first rank and as the last rank of its last machine, in 2 processes that call
# them in other orders. check(): no CUDA, too few GPUs and enough, 3 ranks a machine, 2
# nodes where WORLD_SIZE is past the GPUs; the grader's cases other nodes of each kind.
BACKEND_MACHINES = {
    CHECK_SEED: (
        (0, 1, 2),
        (0, 1, 1),
        (1, 1, 2),
        (4, 1, 2),
        (2, 1, 2),
        (4, 1, 3),
        (2, 1, 3),
        (8, 2, 8),
        (4, 2, 8),
        (2, 2, 2),
    ),
    HIDDEN_SEEDS[0]: ((0, 3, 1), (8, 4, 4), (3, 2, 4), (1, 8, 1), (3, 1, 3)),
    HIDDEN_SEEDS[1]: ((6, 3, 3), (2, 1, 5), (5, 1, 5), (4, 3, 6), (0, 2, 2)),
}


def _want(gpus: int, nodes: int, per: int) -> str:
    return "nccl" if gpus >= per and gpus > 0 else "gloo"


def _calls(seed: int) -> list[tuple[int, int, int, int]]:
    """(GPUs a machine, machines, ranks per machine, RANK) of each call: each layout as
    its rank 0 and as the last rank of its last machine."""
    calls = []
    for gpus, nodes, per in BACKEND_MACHINES[seed]:
        ranks = sorted({0, nodes * per - 1})
        calls += [(gpus, nodes, per, rank) for rank in ranks]
    return calls


def _orders(calls) -> list[list[int]]:
    """The order each of 2 processes makes its calls in: in turn, and from the first call
    whose backend differs from the first's (what a kept first answer gets wrong)."""
    first = _want(*calls[0][:3])
    start = next((k for k, c in enumerate(calls) if _want(*c[:3]) != first), 0)
    indices = list(range(len(calls)))
    return [indices, indices[start:] + indices[:start]]


SPACE = Space(
    drawn={
        "world": tuple(sorted({m * p for ms in BACKEND_MACHINES.values() for _, m, p in ms})),
        "machines": tuple(sorted({m for ms in BACKEND_MACHINES.values() for _, m, _ in ms})),
        "calls": tuple(len(_calls(seed)) for seed in BACKEND_MACHINES),
    },
    why_not={
        "steps": "it keeps nothing from one call to the next: the calls are drawn above",
        "counts": "it is given no count: the GPUs a machine has (none to 8) and the ranks it "
        "runs are the machines drawn above",
        "dtypes": "it handles no values: it names a backend",
        "model": "it is given no model",
        "lengths": "it is given no data",
        "device": "it names a backend, not a device: CUDA present or absent is drawn with the "
        "machines",
    },
)


def _on_machine(fn, gpus: int, nodes: int, per: int, rank: int) -> tuple[str, str]:
    """In a rank: fn() as rank `rank` of `nodes` machines with `gpus` GPUs and `per`
    ranks each; what it returned as str() (dist.Backend.GLOO counts as "gloo") and as its
    repr, both plain text (an object equal to everything is no backend here)."""
    import torch

    with (
        mock.patch.object(torch.cuda, "is_available", lambda: gpus > 0),
        mock.patch.object(torch.cuda, "device_count", lambda: gpus),
        mock.patch.dict(os.environ, layout_env(rank, nodes, per)),
    ):
        got = fn()
    text = str(got)
    return (str.__str__(text) if isinstance(text, str) else shown(text)), shown(got)


def _backend_harness(fn, calls, orders):
    """In each of 2 ranks: every call, in this rank's order; the answers in the calls'."""
    answers = [None] * len(calls)
    for k in orders[int(os.environ["RANK"])]:
        answers[k] = _on_machine(fn, *calls[k])
    return answers


def _machine(gpus: int, nodes: int, per: int) -> Phrase:
    return Phrase(
        _machine_key(gpus, nodes),
        gpus=gpus,
        local=per,
        world=nodes * per,
        nodes=nodes,
    )


def _check_backend(fn, seed: int = CHECK_SEED) -> Phrase:
    calls = _calls(seed)
    runs = run_on_ranks(_backend_harness, fn, calls, _orders(calls), nprocs=2)
    for k, (gpus, nodes, per, _) in enumerate(calls):
        (text, shown), (other, other_shown) = runs[0][k], runs[1][k]
        if text != other:
            with trying(ranks=nodes * per, machines=nodes):
                if text == _want(gpus, nodes, per):
                    shown, other_shown = other_shown, shown
                raise Wrong(
                    "backend_kept",
                    machine=_machine(gpus, nodes, per),
                    got=Opaque("", shown),
                    other=Opaque("", other_shown),
                    want=_want(gpus, nodes, per),
                )
    answers = runs[0]
    _judge_ranks_agree(calls, answers)
    for k, (_, nodes, per, _) in enumerate(calls):
        with trying(ranks=nodes * per, machines=nodes):
            _judge_machine(calls, answers, k)
    return Phrase("backend_ok", cases=len(BACKEND_MACHINES[seed]), calls=len(calls))


def _judge_ranks_agree(calls, answers) -> None:
    """The ranks of one machine pick the same backend (or init_process_group hangs)."""
    for k, (gpus, nodes, per, rank) in enumerate(calls):
        for j in range(k):
            if calls[j][:3] == (gpus, nodes, per) and answers[j][0] != answers[k][0]:
                with trying(ranks=nodes * per, machines=nodes):
                    raise Wrong(
                        "backend_ranks_differ",
                        machine=_machine(gpus, nodes, per),
                        got=Opaque("", answers[j][1]),
                        local=calls[j][3] % per,
                        other=Opaque("", answers[k][1]),
                        other_local=rank % per,
                    )


def _judge_machine(calls, answers, k: int) -> None:
    """One call's backend, or the Wrong that names what the answer compared."""
    gpus, nodes, per, _ = calls[k]
    (text, shown), want = answers[k], _want(gpus, nodes, per)
    if text == want:
        return
    fields = {"machine": _machine(gpus, nodes, per), "got": Opaque("", shown), "want": want}
    if text not in ("nccl", "gloo"):
        raise Wrong("backend_other", machine=fields["machine"], got=fields["got"])
    if text == "nccl":
        raise Wrong("backend_no_cuda" if gpus == 0 else "backend_too_few", **fields)
    # gloo where each rank has a GPU: by WORLD_SIZE, if nccl was right on one machine
    one_machine_nccl = [
        a[0] == "nccl"
        for c, a in zip(calls, answers, strict=True)
        if c[1] == 1 and _want(*c[:3]) == "nccl"
    ]
    by_world = nodes > 1 and any(one_machine_nccl)
    raise Wrong("backend_local" if by_world else "backend_enough", **fields)


exercise = Exercise(
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
        "backend_other": Mistake(hint="backend_cuda"),
        "backend_ranks_differ": Mistake(hint="backend_gpu_per_rank"),
        "backend_kept": Mistake(),
    },
    hidden=on_hidden_seeds(_check_backend),
    space=SPACE,
)
