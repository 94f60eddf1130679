"""The grader's side of one submission: start its worker process (worker.py), supervise it
up to a backstop deadline, and turn the Outcome it prints into the submission's Row.

Runs in the grader, once per submission (the batch's threads call grade_one). Whatever
goes wrong with the worker (killed from outside, stuck, a bug) costs that row only, and
nothing the worker started survives it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

from ... import i18n
from ...entry_points import WORKER
from ...exercises import exercises_of
from ...exercises.verdicts import CheckStatus
from ...i18n import messages
from ...procs import PIPE_WAIT, Reaper, describe_exit, supervise, with_this_package
from ..budget import TICKS, TimeBudget
from ..confinement.sandbox import CGROUP_NAME_ENV, Confinement, cgroup_name, remove_leftover_cgroups
from ..results import Event, ExerciseScore, Outcome, Row, Status, Submission

MESSAGES = messages(
    "grading.dispatch",
    {
        "worker_failed": (
            "The grader itself failed on this submission ({how}); please report it with this "
            "output:\n{output}"
        ),
        "grader_raised": (
            "The grader itself failed on this submission; please report it with this error: {error}"
        ),
        "worker_killed": (
            "The process grading this submission was {how} from outside (the out-of-memory "
            "killer, if the notebook used too much memory); everything it had started was "
            "stopped. Grade it again on its own to see whether it repeats."
        ),
        "worker_stuck": (
            "The grader stopped this submission after {limit:g} s in all (the notebook's limit "
            "plus every exercise's)."
        ),
    },
)


def grade_one(
    sub: Submission,
    budget: TimeBudget,
    cancel: threading.Event | None = None,
    tmp_root: str | None = None,
    confinement: Confinement | None = None,
) -> Row:
    """Grade one submission in a worker process; always returns its Row, never raises.
    What it says of the run is in the submission's language."""
    with i18n.using(sub.language):
        return _grade_one(sub, budget, cancel, tmp_root, confinement)


def _grade_one(sub, budget: TimeBudget, cancel, tmp_root, confinement) -> Row:
    if sub.problem is not None:
        return Row.invalid(sub)
    started = time.monotonic()
    exercises = exercises_of(sub.lesson)
    # Backstop only: the worker enforces the limits itself and reports on them.
    limit = budget.total(exercises)
    try:
        conf = confinement or Confinement()
        outcome, failure = _run_worker(sub, budget, limit, cancel, tmp_root, conf)
    except Exception as exc:  # noqa: BLE001 - the grader's own trouble costs this row only
        outcome = None
        failure = MESSAGES["grader_raised"].format(error=f"{type(exc).__name__}: {exc}")
    seconds = time.monotonic() - started
    if outcome is None:
        scores = [
            ExerciseScore(ex.id, ex.name, ex.points, CheckStatus.ERROR, mistake="not_scored")
            for ex in exercises
        ]
        return Row(sub, Status.ERROR, scores, [Event("grader", failure)], seconds)
    return Row(
        sub,
        outcome.status,
        outcome.exercises,
        outcome.events,
        seconds,
        outcome.run_seconds,
        outcome.score_seconds,
    )


def _run_worker(
    sub, budget: TimeBudget, limit, cancel, tmp_root, conf: Confinement
) -> tuple[Outcome | None, str | None]:
    """(the worker's outcome, None) or (None, why there is none); nothing it started survives."""
    env = with_this_package(dict(os.environ))
    if tmp_root is not None:
        env["TMPDIR"] = tmp_root  # the worker's folder is made in the batch's own
    env["DDP_HELPERS_GRADER_PID"] = str(os.getpid())
    env[CGROUP_NAME_ENV] = cgroups = cgroup_name()
    proc = subprocess.Popen(
        [sys.executable, "-P", "-m", WORKER]
        + [str(sub.path), sub.lesson, json.dumps(budget.to_json()), json.dumps(conf.to_json())],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # Ctrl-C reaches the grader, which stops the workers itself
        env=env,
    )
    # The worker cleans up after itself (SIGTERM, worker_grace); a worker killed from outside
    # leaves what it started, noted as it ran, and its cgroups.
    reaper = Reaper(proc, cgroups=lambda: remove_leftover_cgroups(conf, cgroups, budget.reap))
    try:
        output = _wait_for_worker(proc, limit, cancel, reaper.note)
        if output is None:
            return None, MESSAGES["worker_stuck"].format(limit=limit)
        return _outcome_of(proc, *output)
    finally:
        reaper.reap(budget.worker_grace)


def _wait_for_worker(proc, limit: float, cancel, watch) -> tuple[bytes, bytes] | None:
    """The worker's (stdout, stderr), or None past limit or on cancel; `watch()` runs on
    every tick meanwhile (its descendants noted)."""
    output: list[bytes] = []

    def finished(wait: float) -> bool:
        try:
            output[:] = proc.communicate(timeout=wait)
        except subprocess.TimeoutExpired:
            return False
        return True

    end = time.monotonic() + limit

    def deadline() -> float:
        return 0.0 if cancel is not None and cancel.is_set() else end  # as past the limit

    ended = supervise(proc, finished, deadline, watch, tick=TICKS.worker)
    if ended == "late":
        return None
    if ended == "exited" and not finished(PIPE_WAIT):  # its last words, unless an orphan
        return b"", b""  # holds its pipe
    return output[0], output[1]


def _outcome_of(proc, out: bytes, err: bytes) -> tuple[Outcome | None, str | None]:
    """The Outcome the worker printed last, or why there is none (how it ended, its stderr)."""
    try:
        line = out.decode(errors="replace").strip().splitlines()[-1]
        return Outcome.from_json(json.loads(line)), None
    except (IndexError, json.JSONDecodeError, KeyError, TypeError):
        if proc.returncode < 0:  # killed from outside: the out-of-memory killer, or a person
            return None, MESSAGES["worker_killed"].format(how=describe_exit(proc.returncode))
        tail = "\n".join(err.decode(errors="replace").strip().splitlines()[-20:])
        how = describe_exit(proc.returncode)
        return None, MESSAGES["worker_failed"].format(how=how, output=tail)
