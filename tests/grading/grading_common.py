"""What the grading tests share: the grader's command line in a folder of its own, and
rows and submissions made by hand for the logic tests."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import psutil
from fixtures.submissions import FLOOD_SECONDS

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


# ---------------------------------------------------------------- the command line, as run


def tmpdir_of(cwd: Path) -> Path:
    """The TMPDIR of a run in cwd: short, so that a sandboxed batch keeps its folder there
    (batch._short_tmp moves it to /tmp when TMPDIR is long), and its run's own, so that what
    is left of this run is told apart from other tests' batches running at the same time."""
    return Path("/tmp") / f"dgs-{hashlib.sha1(str(cwd).encode()).hexdigest()[:10]}"


def grade_in(args, cwd: Path, **env) -> subprocess.CompletedProcess:
    """`grade` run in cwd; `.tmp_left` lists what it left in its TMPDIR (then removed)."""
    tmpdir = tmpdir_of(cwd)
    tmpdir.mkdir(exist_ok=True)
    environ = with_this_package(dict(os.environ, TMPDIR=str(tmpdir), **env))
    try:
        run = subprocess.run(
            [sys.executable, "-m", "ddp_helpers", "grade", *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=600,
            env=environ,
        )
        run.tmp_left = sorted(p.name for p in tmpdir.iterdir())
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
    return run


def outputs_of(tmp: Path) -> dict[str, str]:
    """Every file a run wrote for the instructor and the learners, by name: its text."""
    files = [tmp / "grades.csv", tmp / "report.html", *(tmp / "feedback").iterdir()]
    files += (tmp / "gs").rglob("results.json")
    return {str(path.relative_to(tmp)): path.read_text() for path in files}


def left_running(tmp: Path) -> list[str]:
    """Processes of the run still alive: anything working under tmp, and the flood's sleepers."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.status() == psutil.STATUS_ZOMBIE or p.pid == os.getpid():
                continue
            cwd = Path(p.cwd())  # a folder since removed reads "... (deleted)", still below
            # Not any ddp-grade- folder: other tests' batches work in theirs at the same time.
            ours = cwd.is_relative_to(tmp) or cwd.is_relative_to(tmpdir_of(tmp))
            if ours or p.cmdline() == ["sleep", FLOOD_SECONDS]:
                found.append(" ".join(p.cmdline()))
        except (psutil.Error, OSError):
            continue
    return found
