"""Shared fixtures: every launcher test also proves that no rank process is left behind."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parent.parent
# "At once", for a failure or a stop that would otherwise take a minute or forever (a rank
# sleeping 60 s, a collective's 60 s timeout, a cell that never ends): far under those, so
# passing still proves the launcher did not wait them out, and loose enough for a 2-core
# machine under make test's load, where 3 s was once not enough (a raise took 3.8 s in CI).
SOON = 15.0
sys.path.insert(0, str(ROOT))
# This folder ahead of it: a rank that imports a test module (a function of it, pickled by
# reference) must find this file as `conftest`, not the repository's own conftest.py, or
# `pytest tests/launcher/test_launch.py` alone fails where the whole suite passes.
TESTS = str(Path(__file__).resolve().parent)
if TESTS in sys.path:
    sys.path.remove(TESTS)
sys.path.insert(0, TESTS)


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


def _rank_processes() -> list[psutil.Process]:
    from ddp_helpers.launcher import client

    zygote = client.running()
    return [] if zygote is None else psutil.Process(zygote.proc.pid).children(recursive=True)


@pytest.fixture
def no_leftovers():
    """Fails the test if any rank process (or child of one) outlives its launch."""
    yield
    # Spares are forked ahead of the next launch and wait idle: they are not leftovers.
    left = [
        p
        for p in _rank_processes()
        if p.is_running() and p.status() != "zombie" and p.name() != "ddp-spare"
    ]
    assert not left, f"processes left running after the launch: {left}"


@pytest.fixture(autouse=True)
def _quiet_threads(monkeypatch):
    # Two cores here; one thread per rank keeps the tests' timing honest.
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.delenv("DDP_HELPERS_OUTPUT", raising=False)
    yield


def pytest_sessionfinish(session, exitstatus):
    from ddp_helpers.launcher import client

    client.shutdown()
    os.environ.pop("DDP_HELPERS_OUTPUT", None)


@pytest.fixture(scope="session")
def _screenshots(tmp_path_factory):
    return tmp_path_factory.mktemp("screenshots")


@pytest.fixture
def shots(_screenshots, record_property):
    """A folder for the browser tests' screenshots, named at the end of the run."""
    record_property("ddp_note", f"browser screenshots of the lessons: {_screenshots}")
    return _screenshots


# The real two-node SLURM of tests/cluster, one per session (and xdist worker): declared
# here once, so each test file that asks for it shares it.
from cluster.slurm import slurm_cluster  # noqa: E402, F401
