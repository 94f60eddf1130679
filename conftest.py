"""pytest set-up shared by the unit tests and `--nbval` over solutions/."""

from __future__ import annotations

import os
import signal
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent

_NOTEBOOK_SECONDS: dict[str, float] = defaultdict(float)
# Lines a test wants shown at the end (where its files are): a test records them as the
# user property "ddp_note", which reaches this process also from pytest-xdist's workers.
_NOTES: dict[str, None] = {}
# Seconds per test file (every phase, set-up and tear-down included): the end of the run
# names the slowest, so that where the minutes go is in every log.
_FILE_SECONDS: dict[str, float] = defaultdict(float)
SLOWEST_SHOWN = 12

# What a test file costs or needs, beyond its own process (pyproject.toml declares the
# markers). `make test-fast` deselects e2e: the logic tests, in seconds. A file
# here carries its marks on every test; a test elsewhere that needs a browser says so itself
# (@pytest.mark.browser). Every notebook under solutions/ is e2e.
MARKS: dict[str, tuple[str, ...]] = {
    # A folder's marks hold for each file in it that is not named itself.
    "tests/claims/": ("e2e",),  # torch's own processes, outside the course's launcher
    "tests/claims/test_claims_doc.py": (),  # the ledger read against the lessons' text
    "tests/cluster/": ("e2e",),
    "tests/cluster/test_slurm_cluster.py": ("e2e", "cluster"),
    "tests/cluster/test_slurm_job.py": ("e2e", "cluster"),
    "tests/demos/": ("e2e",),
    "tests/exercises/drawn/": ("e2e",),  # each check on its ranks, over its declared space
    "tests/exercises/test_answers.py": ("e2e",),
    "tests/exercises/test_capstone.py": ("e2e",),
    "tests/exercises/test_earlier_first.py": ("e2e",),
    "tests/exercises/test_exercises.py": ("e2e",),
    "tests/exercises/test_spaces.py": ("e2e",),
    "tests/authoring/test_export.py": ("e2e",),  # torchrun
    "tests/authoring/test_fsdp_train.py": ("e2e",),
    "tests/authoring/test_recipe.py": ("e2e",),
    "tests/authoring/test_site.py": ("e2e",),
    "tests/grading/test_autograder.py": ("e2e", "sandbox"),
    "tests/grading/test_disk.py": ("e2e", "sandbox"),
    "tests/grading/test_grading_end_to_end.py": ("e2e", "sandbox"),
    "tests/grading/test_hostile.py": ("e2e", "sandbox"),
    "tests/grading/test_hostile_paths.py": ("e2e",),
    "tests/grading/test_sandbox.py": ("e2e", "sandbox"),
    "tests/grading/test_scorer.py": ("e2e",),
    "tests/grading/test_stopping.py": ("e2e",),
    "tests/launcher/test_faults.py": ("e2e",),
    "tests/launcher/test_guards.py": ("e2e",),
    "tests/launcher/test_launch.py": ("e2e",),
    "tests/launcher/test_notebook_kernel.py": ("e2e",),  # Jupyter kernels
    "tests/launcher/test_torchrun_env.py": ("e2e",),
    "tests/test_binder.py": ("e2e",),  # pip into fresh venvs
    "tests/test_browser.py": ("e2e", "browser"),
    "tests/test_browser_ja.py": ("e2e", "browser"),
    "tests/test_lab.py": ("e2e",),  # JupyterLab
    "tests/test_torch_compat.py": ("e2e",),
}


def marks_of(where: str) -> tuple[str, ...]:
    """The marks of a test file, by its path from the repository's root."""
    if where.startswith("solutions/"):
        return ("e2e",)
    if where in MARKS:
        return MARKS[where]
    return MARKS.get(where.rsplit("/", 1)[0] + "/", ())


def pytest_configure(config):
    # Kernels started by nbval inherit this: every multi-rank cell prints rank 0's lines,
    # then rank 1's, ... so the stored outputs can be compared line by line.
    os.environ["DDP_HELPERS_OUTPUT"] = "ordered"
    # A shell starts a background job (`make test &`, a script's `cmd &`) with Ctrl-C
    # ignored, and Python then keeps it ignored, in this process, the workers and every
    # process they start. The tests of Ctrl-C (the launcher's stop, the grader's batch and
    # its command) press it and expect what a terminal gives: Python's own handler.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(config, items):
    for item in items:
        path = Path(str(item.path)).resolve()
        try:
            where = path.relative_to(ROOT).as_posix()
        except ValueError:  # a test outside the repository: unmarked
            continue
        marks = marks_of(where)
        if item.get_closest_marker("browser") is not None:
            marks = (*marks, "e2e")
        for mark in marks:
            item.add_marker(getattr(pytest.mark, mark))


def pytest_runtest_logreport(report):
    _FILE_SECONDS[report.nodeid.split("::")[0]] += report.duration
    for name, value in report.user_properties:
        if name == "ddp_note":
            _NOTES.setdefault(value)
    if report.when == "call" and ".ipynb::" in report.nodeid:
        _NOTEBOOK_SECONDS[report.nodeid.split("::")[0]] += report.duration


def pytest_terminal_summary(terminalreporter):
    if _NOTES:
        terminalreporter.section("notes")
        for note in _NOTES:
            terminalreporter.write_line(note)
    if _FILE_SECONDS:
        terminalreporter.section(f"where the time went: the {SLOWEST_SHOWN} slowest files")
        slowest = sorted(_FILE_SECONDS.items(), key=lambda kv: -kv[1])[:SLOWEST_SHOWN]
        for path, seconds in slowest:
            terminalreporter.write_line(f"{seconds:7.1f} s  {path}")
        total = sum(_FILE_SECONDS.values())
        terminalreporter.write_line(f"{total:7.1f} s  every test, summed over the workers")
    if not _NOTEBOOK_SECONDS:
        return
    terminalreporter.section("solution notebooks: execution time")
    for path, seconds in sorted(_NOTEBOOK_SECONDS.items()):
        terminalreporter.write_line(f"{path}: {seconds:.1f} s")
    terminalreporter.write_line(f"total: {sum(_NOTEBOOK_SECONDS.values()):.1f} s")
