"""A batch as `python -m ddp_helpers grade` and Gradescope's autograder run it.

`run_batch(paths, options)` owns what a whole grading run needs around `grade()`: the
confinement chosen (and, when the sandbox was not asked for and cannot run, the note that
says so), this process made the reaper of its workers' orphans, SIGTERM and SIGHUP turned
into the clean stop Ctrl-C gives, and every process it started gone at the end, whatever
happens. The command line only parses; the autograder calls this too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import sys

from ..procs import become_subreaper, kill_descendants
from .confinement.sandbox import SandboxError, choose, fallback_note
from .orchestration.batch import GradeOptions, grade
from .results import Row


def _interrupt(signum, frame):
    raise KeyboardInterrupt


@contextlib.contextmanager
def _termination_interrupts():
    """SIGTERM and SIGHUP (a closed terminal) stop the grader as Ctrl-C does: cleanly."""
    before = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def run_batch(paths, options: GradeOptions, *, notes=None) -> list[Row]:
    """Grade `paths` as `options` say; return the rows. Raises SandboxError for a
    confinement that cannot be had or is asked for wrongly (before anything is graded),
    GradingError for paths with nothing to grade, OSError for outputs that cannot be
    written, and KeyboardInterrupt when stopped (Ctrl-C, SIGTERM, SIGHUP), each with no
    process left."""
    confinement = options.confinement
    if confinement is None:
        try:
            confinement = choose(options.request)
        except ValueError as exc:  # a limit given wrong: what the sandbox cannot be asked
            raise SandboxError(str(exc)) from None
        if options.request.sandbox is None and not confinement.sandbox:
            print(f"note: {fallback_note()}", file=notes or sys.stderr)  # the first line
        options = dataclasses.replace(options, confinement=confinement)
    become_subreaper()  # a worker killed from outside leaves its processes to this one
    try:
        with _termination_interrupts():
            return grade(paths, options)
    finally:
        kill_descendants()
