"""Shared fixtures: every launcher test also proves that no rank process is left behind.
What test files share besides fixtures is in support.py."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import psutil
import pytest

# This folder first on the path: a rank that imports a test module (a function of it,
# pickled by reference) must find the modules here (support.py, the test files), not the
# repository's own conftest.py, or `pytest tests/launcher/test_launch.py` alone fails where
# the whole suite passes.
TESTS = str(Path(__file__).resolve().parent)
if TESTS in sys.path:
    sys.path.remove(TESTS)
sys.path.insert(0, TESTS)

from support import ROOT  # noqa: E402

sys.path.insert(1, str(ROOT))


def _rank_processes() -> list[psutil.Process]:
    from ddp_helpers.launcher import client

    zygote = client.running()
    return [] if zygote is None else psutil.Process(zygote.proc.pid).children(recursive=True)


@pytest.fixture(autouse=True)
def no_leftovers():
    """Fails any test after which a rank process (or a child of one) outlives its launch:
    every test, so that a new one is held to it without asking."""
    yield
    left = [p for p in _rank_processes() if p.is_running() and p.status() != "zombie"]
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
