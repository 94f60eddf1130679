"""pytest set-up shared by the unit tests and `--nbval` over solutions/."""

from __future__ import annotations

import os
from collections import defaultdict

_NOTEBOOK_SECONDS: dict[str, float] = defaultdict(float)
# Lines a test wants shown at the end (where its files are): a test records them as the
# user property "ddp_note", which reaches this process also from pytest-xdist's workers.
_NOTES: dict[str, None] = {}


def pytest_configure(config):
    # Kernels started by nbval inherit this: every multi-rank cell prints rank 0's lines,
    # then rank 1's, ... so the stored outputs can be compared line by line.
    os.environ["DDP_HELPERS_OUTPUT"] = "ordered"


def pytest_runtest_logreport(report):
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
    if not _NOTEBOOK_SECONDS:
        return
    terminalreporter.section("solution notebooks: execution time")
    for path, seconds in sorted(_NOTEBOOK_SECONDS.items()):
        terminalreporter.write_line(f"{path}: {seconds:.1f} s")
    terminalreporter.write_line(f"total: {sum(_NOTEBOOK_SECONDS.values()):.1f} s")
