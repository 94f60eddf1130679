"""What the test files share besides fixtures: the repository, how soon "at once" is, what a
run left behind. Test files import it as `support`; conftest.py holds pytest's fixtures and
hooks, and is not imported as a module (a rank that unpickles a test's function would find
another `conftest` first: the repository's own)."""

from __future__ import annotations

import os
from pathlib import Path

import psutil

from ddp_helpers.paths import ROOT  # noqa: F401 - the repository, as the package finds it

# "At once", for a failure or a stop that would otherwise take a minute or forever (a rank
# sleeping 60 s, a collective's 60 s timeout, a cell that never ends): far under those, so
# passing still proves the launcher did not wait them out, and loose enough for a 2-core
# machine under make test's load, where 3 s was once not enough (a raise took 3.8 s in CI).
SOON = 15.0


def processes_under(folder: Path) -> list[psutil.Process]:
    """Processes (not this one) working in a folder under `folder`: what a run left there.

    Everything a grading run starts works in a folder under the one it was given (the
    grader's folder, or the TMPDIR given to it), so this finds them and nothing else.
    """
    found = []
    for p in psutil.process_iter():
        try:
            if p.pid != os.getpid() and p.status() != psutil.STATUS_ZOMBIE:
                if Path(p.cwd()).is_relative_to(folder):
                    found.append(p)
        except (psutil.Error, OSError):
            continue
    return found


def extra_case_lines() -> set[str]:
    """Lines of the grader's extra cases' code, long enough to be telling if they leaked."""
    import inspect

    from ddp_helpers.exercises import LESSONS, exercises_of

    return {
        line.strip()
        for lesson in LESSONS
        for ex in exercises_of(lesson)
        if ex._hidden is not None
        for line in inspect.getsource(ex._hidden).splitlines()[1:]
        if len(line.strip()) > 20 and not line.strip().startswith(("#", '"""', "raise Wrong"))
    }


def logged_losses(log: str) -> list[float]:
    """Each epoch's loss as the exported script's rank 0 logs it ("epoch 2: loss 0.445761
    over 96 examples")."""
    lines = [x for x in log.splitlines() if x.startswith("epoch ")]
    return [float(x.split("loss ")[1].split()[0]) for x in lines]


class Sink:
    """Where an OutputRouter writes, in a test: (stream, text) pairs, and the lines."""

    def __init__(self):
        self.out = []

    def __call__(self, stream, text):
        self.out.append((stream, text))

    def lines(self, stream="stdout"):
        return "".join(t for s, t in self.out if s == stream).splitlines()


def setup_on_a_machine(monkeypatch, setup, gpus: int, local_world: str) -> tuple[list, str]:
    """A training script's setup() as rank 9 of 16, local rank 1 of `local_world`, on a
    machine with `gpus` GPUs (faked; nothing is initialised): the (backend, device_id) each
    init_process_group was asked for, and the device setup returned."""
    import torch

    chosen = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: None)
    monkeypatch.setattr(
        torch.distributed,
        "init_process_group",
        lambda backend, **kwargs: chosen.append((backend, str(kwargs.get("device_id")))),
    )
    env = {"RANK": "9", "LOCAL_RANK": "1", "WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": local_world}
    monkeypatch.setattr(os, "environ", dict(os.environ, **env))
    return chosen, str(setup())
