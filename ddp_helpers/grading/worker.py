"""One submission, graded in a process of its own: its notebook runs in a fresh kernel, then
its answers are scored (scorer.py). The batch starts one worker per submission.

`python -m ddp_helpers.grading.worker NOTEBOOK LESSON TIMEOUT` prints one JSON line, the
submission's Outcome. The worker is a child subreaper (Linux), so every process the
submission starts (kernel, launcher, ranks, anything that daemonised) ends up as its
descendant and is killed before the outcome is printed. The answers leave the kernel by
value (cloudpickle) after every cell.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from ..procs import (
    become_subreaper,
    describe_exit,
    die_with_parent,
    kill_descendants,
    with_this_package,
)
from .kernel import Kernel, KernelDied, error_text
from .results import Event, ExerciseScore, Outcome, Row, Status, Submission
from .sandbox import Cage, Confinement
from .scorer import MIN_CHECK_LIMIT, score
from .submissions import code_sources

KERNEL_START_LIMIT = 60.0  # seconds for a fresh kernel to answer; not counted in TIMEOUT

MESSAGES = {
    "kernel_start": "The Jupyter kernel did not start ({why}). Kernel log:\n{log}",
    "timeout": (
        "The notebook was stopped after {limit:g} s: it was still running code cell "
        "{cell} (`{first_line}`). Cells after it were not run."
    ),
    "died": (
        "The kernel died ({how}) while running code cell {cell} (`{first_line}`); "
        "cells after it were not run."
    ),
    "cell_error": "Code cell {cell} (`{first_line}`) raised {ename}: {evalue}",
    "probe": (
        "After code cell {cell} (`{first_line}`) the grader could not take the answers out "
        "of the kernel: {how}. Cells after it were not run; answers from earlier cells count."
    ),
    "probe_hung": "it did not finish",
    "probe_died": "the kernel died ({how})",
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
}

# Runs in the learner's kernel after every cell: pickles the answers by value into a file.
# Executed in a fresh namespace, so it defines nothing in the learner's.
_PROBE = """
import os, pickle
import cloudpickle
from IPython import get_ipython
ns = get_ipython().user_ns
found = {}
for name in NAMES:
    if name in ns:
        try:
            found[name] = ("ok", cloudpickle.dumps(ns[name]))
        except BaseException as exc:
            found[name] = ("error", f"{type(exc).__name__}: {exc}")
with open(PATH + ".tmp", "wb") as f:
    pickle.dump(found, f)
os.replace(PATH + ".tmp", PATH)
"""


def _first_line(source: str) -> str:
    for line in source.splitlines():
        if line.strip():
            return line.strip()[:80]
    return ""


def _child_env(workdir: str) -> dict:
    env = dict(os.environ)
    env["TMPDIR"] = os.path.join(workdir, "tmp")  # the submission's temporary files die with it
    env.pop("DDP_HELPERS_OUTPUT", None)
    env["DDP_HELPERS_WARM_UP"] = "0"  # the launcher starts at a launch, if the notebook has one
    return with_this_package(env)  # the grader's own copy, wherever the notebook runs


# ---------------------------------------------------------------- in the worker process


def run_notebook(
    cells: list[str], names: list[str], workdir: str, limit: float, cage: Cage | None = None
) -> tuple[Status, list[Event], float]:
    """Run the code cells in a fresh kernel, taking the answers out after each one.

    Returns the status, what happened, and the seconds it took; the answers are in
    workdir/answers.pkl.
    """
    answers = os.path.join(workdir, "answers.pkl")
    probe = f"exec({_PROBE!r}, {{'NAMES': {names!r}, 'PATH': {answers!r}}})"
    status, events = Status.OK, []
    started = time.monotonic()
    kernel = Kernel(workdir, _child_env(workdir), cage)
    try:
        try:
            kernel.wait_ready(KERNEL_START_LIMIT)
        except (KernelDied, TimeoutError) as exc:
            text = MESSAGES["kernel_start"].format(why=exc, log=kernel.log_tail())
            return Status.ERROR, [Event("kernel", text)], time.monotonic() - started
        deadline = time.monotonic() + limit
        for number, source in enumerate(cells, 1):
            where = {"cell": number, "first_line": _first_line(source)}
            try:
                error = kernel.execute(source, deadline)
            except TimeoutError as exc:
                error = kernel.interrupt(exc.args[0])
                status = Status.TIMEOUT
                text = MESSAGES["timeout"].format(limit=limit, **where)
                events.append(Event("timeout", text, error_text(error) if error else "", number))
                if error is not None:  # the kernel came back: what it defined still counts
                    with contextlib.suppress(TimeoutError, KernelDied):
                        kernel.execute(probe, time.monotonic() + 30, silent=True)
                break
            except KernelDied as exc:
                status = Status.ERROR
                text = MESSAGES["died"].format(how=exc, **where)
                events.append(Event("died", text, kernel.log_tail(), number))
                break
            if error is not None:
                text = MESSAGES["cell_error"].format(
                    ename=error.get("ename"), evalue=error.get("evalue"), **where
                )
                events.append(
                    Event("cell_error", text, error_text(error), number, name=error.get("ename"))
                )
            try:
                kernel.execute(probe, max(deadline, time.monotonic() + 30), silent=True)
            except (TimeoutError, KernelDied) as exc:
                # Taking the answers out ran the notebook's objects' pickling code: it hung or
                # ended the kernel. What earlier cells defined still counts.
                hung = isinstance(exc, TimeoutError)
                how = MESSAGES["probe_hung"] if hung else MESSAGES["probe_died"].format(how=exc)
                status = Status.TIMEOUT if hung else Status.ERROR
                events.append(
                    Event("probe", MESSAGES["probe"].format(how=how, **where), cell=number)
                )
                break
    finally:
        kernel.stop()
    return status, events, time.monotonic() - started


def _stop_with_the_grader() -> None:
    """SIGTERM (from the grader, or sent by Linux when the grader dies) runs the clean-up."""

    def stop(signum, frame):
        raise SystemExit(128 + signum)  # unwinds through grade_submission's `finally`

    signal.signal(signal.SIGTERM, stop)
    grader = os.environ.get("DDP_HELPERS_GRADER_PID")
    if grader:
        die_with_parent(int(grader), signal.SIGTERM)


def grade_submission(
    path: str, lesson: str, limit: float, confinement: Confinement | None = None
) -> Outcome:
    """Run and score one notebook; nothing it started is left when this returns."""
    from ..exercises import exercises_of

    become_subreaper()
    _stop_with_the_grader()
    exercises = exercises_of(lesson)
    workdir = tempfile.mkdtemp(prefix="ddp-grade-")
    for sub in ("cwd", "tmp", "score"):
        os.mkdir(os.path.join(workdir, sub))
    cage = Cage(confinement or Confinement(), workdir)
    try:
        cells = code_sources(path)
        status, events, run_seconds = run_notebook(
            cells, [ex.name for ex in exercises], workdir, limit, cage
        )
        kill_descendants()  # the kernel's launcher and ranks, before the learner's code runs again
        started = time.monotonic()
        scores, check_events = score(
            os.path.join(workdir, "answers.pkl"),
            lesson,
            workdir,
            _child_env(workdir),
            max(limit, MIN_CHECK_LIMIT),
            cage,
        )
        kinds = {e.kind for e in check_events}
        if status is Status.OK and kinds:  # a check that hung or died is the submission's too
            status = Status.ERROR if "check_died" in kinds else Status.TIMEOUT
        memory_errors = sum(e.name == "MemoryError" for e in events)
        hit = cage.hit(memory_errors)
        if hit is not None:  # over a limit: the submission's row says which
            status = Status.ERROR
            events.insert(0, Event("limit", cage.message(hit)))  # the cause, before its effects
        return Outcome(
            status, scores, events + check_events, run_seconds, time.monotonic() - started
        )
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the clean-up itself is not cut short
        kill_descendants()
        cage.close()
        shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str]) -> int:
    path, lesson, limit, confinement = argv
    outcome = grade_submission(
        path, lesson, float(limit), Confinement.from_json(json.loads(confinement))
    )
    sys.stdout.write(json.dumps(outcome.to_json()) + "\n")
    sys.stdout.flush()
    return 0


# ---------------------------------------------------------------- in the grader


def grade_one(
    sub: Submission,
    timeout: float,
    cancel: threading.Event | None = None,
    tmp_root: str | None = None,
    confinement: Confinement | None = None,
) -> Row:
    """Grade one submission in a worker process; always returns its Row, never raises."""
    from ..exercises import exercises_of

    if sub.problem is not None:
        return Row.invalid(sub)
    started = time.monotonic()
    exercises = exercises_of(sub.lesson)
    # Backstop only: the worker enforces the limits itself and reports on them.
    limit = KERNEL_START_LIMIT + timeout + len(exercises) * max(timeout, MIN_CHECK_LIMIT) + 120
    try:
        conf = confinement or Confinement()
        outcome, failure = _run_worker(sub, timeout, limit, cancel, tmp_root, conf)
    except Exception as exc:  # noqa: BLE001 - the grader's own trouble costs this row only
        outcome = None
        failure = MESSAGES["grader_raised"].format(error=f"{type(exc).__name__}: {exc}")
    seconds = time.monotonic() - started
    if outcome is None:
        scores = [ExerciseScore(ex.id, ex.name, ex.points, "error") for ex in exercises]
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
    sub, timeout, limit, cancel, tmp_root, conf: Confinement
) -> tuple[Outcome | None, str | None]:
    """(the worker's outcome, None) or (None, why there is none); nothing it started survives."""
    env = with_this_package(dict(os.environ))
    if tmp_root is not None:
        env["TMPDIR"] = tmp_root  # the worker's folder is made in the batch's own
    env["DDP_HELPERS_GRADER_PID"] = str(os.getpid())
    proc = subprocess.Popen(
        [sys.executable, "-P", "-m", "ddp_helpers.grading.worker"]
        + [str(sub.path), sub.lesson, repr(float(timeout)), json.dumps(conf.to_json())],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # Ctrl-C reaches the grader, which stops the workers itself
        env=env,
    )
    seen: dict[int, float] = {}  # the worker's descendants, should it die without cleaning up
    try:
        out, err = _communicate(proc, limit, cancel, seen)
        if out is None:
            return None, MESSAGES["worker_stuck"].format(limit=limit)
        try:
            line = out.decode(errors="replace").strip().splitlines()[-1]
            return Outcome.from_json(json.loads(line)), None
        except (IndexError, json.JSONDecodeError, KeyError, TypeError):
            if proc.returncode < 0:  # killed from outside: the out-of-memory killer, or a person
                return None, MESSAGES["worker_killed"].format(how=describe_exit(proc.returncode))
            tail = "\n".join(err.decode(errors="replace").strip().splitlines()[-20:])
            how = describe_exit(proc.returncode)
            return None, MESSAGES["worker_failed"].format(how=how, output=tail)
    finally:
        if proc.poll() is None:
            _stop_worker(proc)
        _kill_remembered(seen)


def _communicate(proc, limit: float, cancel, seen: dict) -> tuple:
    """proc's (stdout, stderr), or (None, None) past limit or on cancel."""
    import psutil

    deadline = time.monotonic() + limit
    while True:
        try:
            return proc.communicate(timeout=0.5)
        except subprocess.TimeoutExpired:
            if time.monotonic() > deadline or (cancel is not None and cancel.is_set()):
                return None, None
        try:
            for p in psutil.Process(proc.pid).children(recursive=True):
                seen.setdefault(p.pid, p.create_time())
        except psutil.Error:
            pass


def _stop_worker(proc) -> None:
    """SIGTERM: the worker kills what it started and removes its folder; then SIGKILL."""
    with contextlib.suppress(ProcessLookupError):
        proc.terminate()
    try:
        proc.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        kill_descendants(proc.pid, include_self=True)
        proc.communicate()


def _kill_remembered(seen: dict) -> None:
    """Kill what a worker had started, if it outlived the worker (a worker killed by OOM)."""
    import psutil

    alive = []
    for pid, created in seen.items():
        try:
            p = psutil.Process(pid)
            if p.create_time() == created:
                p.kill()
                alive.append(p)
        except psutil.Error:
            continue
    psutil.wait_procs(alive, timeout=5)


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    os._exit(code)
