"""What the grading tests share: the grader's command line in a folder of its own, and
rows and submissions made by hand for the logic tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ddp_helpers.exercises import exercises_of
from ddp_helpers.grading import ExerciseScore, Row, Status, Submission
from ddp_helpers.procs import with_this_package

# The batch's limit. No notebook in it should reach it: a short one runs in 2-4 s here, two
# at a time, and took 10 s with three test files on two cores. Only a timeout costs its limit.
TIMEOUT = 30


def _env(tmp: Path, tmpdir: Path | None = None) -> dict:
    tmpdir = tmpdir or tmp / "tmpdir"
    tmpdir.mkdir(exist_ok=True)
    return with_this_package(dict(os.environ, TMPDIR=str(tmpdir)))


def _grade_cli(args, cwd, timeout=600, tmpdir=None):
    return subprocess.run(
        [sys.executable, "-m", "ddp_helpers", "grade", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_env(cwd, tmpdir),
    )


def _sub(name: str, lesson: str = "01") -> Submission:
    return Submission(Path(name), name, lesson)


def _row(sub: Submission, status: Status, seconds: float = 1.0, right: bool = True) -> Row:
    scores = [
        ExerciseScore(e.id, e.name, e.points, "correct" if right else "not_attempted")
        for e in exercises_of(sub.lesson)
    ]
    return Row(sub, status, scores, [], seconds)
