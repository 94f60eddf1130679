"""Scoring a submission's answers with the grader's own checks, in scorer processes apart
from the learner's kernel: whatever the notebook did to the checks in its kernel is gone.

`python -m ddp_helpers.grading.scorer ANSWERS LESSON FD ID...` scores and writes one JSON
line per event to FD; `score()` runs such processes, a fresh one after one hangs or dies.
"""

from __future__ import annotations

import json
import os
import pickle
import select
import sys
import time

from ..exercises.verdicts import CheckStatus
from ..i18n import messages
from ..procs import describe_exit, kill_descendants, stop_tree, supervise
from .kernel import start_logged
from .results import Event, ExerciseScore

# The grader's own mistakes (keys as in the exercises' tables: a message under its key, a
# title for the class report under f"{key}.title"; "missing" is the exercises' key too).
MESSAGES = messages(
    "grading.scorer",
    {
        "check_timeout": (
            "Checking this answer did not finish within {limit:g} s (an endless loop, or a "
            "rank waiting for one that never comes?), so it was stopped."
        ),
        "check_timeout.title": "its check was stopped at the time limit",
        "check_died": "Checking this answer ended the grader's process ({how}).",
        "check_died.title": "its check ended the grader's process",
        "missing": "`{name}` is not defined in this notebook (was its cell run, or renamed?).",
        "unsendable": "`{name}` could not be taken out of the notebook: {error}",
        "unsendable.title": "could not be taken out of the notebook",
        "unloadable": "`{name}` could not be loaded by the grader: {error}",
        "unloadable.title": "could not be loaded by the grader",
        "from_course": (
            "`{name}` is the course's reference answer imported from `{module}`, not code "
            "written in this notebook: write your own."
        ),
        "from_course.title": "the course's reference answer, imported",
        "not_scored.title": "not scored: the grader failed on the submission",
    },
)


def text(key: str, /, **fields) -> str:
    """The grader's own message or mistake title under `key`, in the current language."""
    return MESSAGES[key].format(**fields)


def from_course(obj) -> str | None:
    """The ddp_helpers module an answer was imported from, or None for notebook code."""
    for _ in range(10):  # functools.partial, functools.wraps, bound methods: look inside
        module = getattr(obj, "__module__", None)
        if isinstance(module, str) and (
            module == "ddp_helpers" or module.startswith("ddp_helpers.")
        ):
            return module
        inner = getattr(obj, "func", None) or getattr(obj, "__wrapped__", None)
        inner = inner or getattr(obj, "__func__", None)
        if inner is None or inner is obj:
            return None
        obj = inner
    return None


def _grader_found(status: CheckStatus, mistake: str, **fields) -> dict:
    """A result the grader gives without the check: one of its own mistakes."""
    return {"status": status, "message": MESSAGES[mistake].format(**fields), "mistake": mistake}


def _score_one(ex, entry) -> dict:
    """The fields of the exercise's ExerciseScore (less its id, name and points)."""
    import cloudpickle

    if entry is None:
        return _grader_found(CheckStatus.MISSING, "missing", name=ex.name)
    kind, payload = entry
    if kind != "ok":
        return _grader_found(CheckStatus.ERROR, "unsendable", name=ex.name, error=payload)
    try:
        answer = cloudpickle.loads(payload)
    except BaseException as exc:  # noqa: BLE001 - whatever the pickle raises is the answer's
        error = f"{type(exc).__name__}: {exc}"
        return _grader_found(CheckStatus.ERROR, "unloadable", name=ex.name, error=error)
    module = from_course(answer)
    if module is not None:
        return _grader_found(CheckStatus.WRONG, "from_course", name=ex.name, module=module)
    result = ex.grade(answer)  # the learner's check, then the grader's hidden cases
    return {
        "status": result.status,
        "message": result.message,
        "hint": result.hint,
        "hidden": result.hidden,
        "mistake": result.mistake,
        "fields": result.title_fields,
    }


def score_answers(answers_path: str, lesson: str, ids: list[str], out) -> None:
    """In the scorer process: each exercise's result as JSON lines on `out`."""
    from ..exercises import exercises_of

    exercises = {ex.id: ex for ex in exercises_of(lesson)}
    try:
        with open(answers_path, "rb") as f:
            found = pickle.load(f)
    except (OSError, EOFError):
        found = {}
    entries = found.values() if isinstance(found, dict) else ()
    if any(isinstance(e, tuple) and e[:1] == ("ok",) for e in entries):
        from ..launcher import client

        client.start()  # the launcher imports torch while the answers load (and import it)
    for ex_id in ids:
        ex = exercises[ex_id]
        out.write(json.dumps({"event": "start", "id": ex_id}) + "\n")
        out.flush()
        done = {"event": "done", "id": ex_id, **_score_one(ex, found.get(ex.name))}
        out.write(json.dumps(done) + "\n")
        out.flush()


def _children() -> set[int]:
    import psutil

    return {p.pid for p in psutil.Process().children()}


def score(
    answers_path: str, lesson: str, workdir: str, env: dict, limit: float, cage=None
) -> tuple[list[ExerciseScore], list[Event]]:
    """Every exercise of the lesson scored, and what went wrong on the way (a hang, a crash).

    An answer that hangs or kills its scorer costs that exercise only: a new scorer takes
    the rest. The caller is a subreaper, so whatever a scorer started is found and killed.
    `env` is the scorers' whole environment (the worker's is sandbox.Cage.env).
    """
    from ..exercises import exercises_of

    exercises = exercises_of(lesson)
    ids = [ex.id for ex in exercises]
    results: dict[str, dict] = {}
    events: list[Event] = []
    while remaining := [i for i in ids if i not in results]:
        stopped_in, kind, text = _run_scorer(
            answers_path, lesson, remaining, workdir, env, limit, results, cage
        )
        if kind is None:
            if all(i in results for i in remaining):
                break
            kind, text = "check_died", MESSAGES["check_died"].format(how="exit code 0")
        progressed = any(i in results for i in remaining)
        if stopped_in is None and progressed:
            continue  # it stopped between two exercises: a new scorer takes the rest
        # It hung or died in one exercise, or before scoring any: that one gets the reason.
        culprit = stopped_in or next(i for i in ids if i not in results)
        results[culprit] = {"status": CheckStatus.ERROR, "message": text, "mistake": kind}
        events.append(Event(kind, text, exercise=culprit))
    scores = [ExerciseScore(ex.id, ex.name, ex.points, **results[ex.id]) for ex in exercises]
    return scores, events


def _run_scorer(answers_path, lesson, ids, workdir, env, limit, results, cage) -> tuple:
    """One scorer process for `ids`, its results put into `results`: (exercise, kind, why)
    if it hung or died, else (None, None, ""). Nothing it started is left."""
    before = _children()
    read_fd, write_fd = os.pipe()
    # -P: nothing the notebook wrote into a folder can shadow a module here.
    argv = [sys.executable, "-P", "-m", "ddp_helpers.grading.scorer"]
    argv += [answers_path, lesson, str(write_fd), *ids]
    cwd = os.path.join(workdir, "score")
    if cage is not None:  # the checks run the learner's code: in its cage too
        argv = cage.command(argv, cwd)
    log = os.path.join(workdir, "scorer.log")
    proc = start_logged(argv, cwd, env, log, pass_fds=(write_fd,))
    os.close(write_fd)
    try:
        return _read_scores(proc, read_fd, limit, results, cage)
    finally:
        os.close(read_fd)
        stop_tree(proc)
        # What it started and left (holding the pipe, perhaps) may have outlived it: orphans
        # are our new children, since this process is a subreaper.
        for pid in _children() - before:
            kill_descendants(pid, include_self=True)


def _read_scores(proc, fd: int, limit: float, results: dict, cage=None) -> tuple:
    """Read the scorer's lines into results: (exercise, kind, why) if it hung or died.

    The limit runs from the scorer's start and from each line it writes, so a scorer that
    hangs between two exercises is stopped too; its exit is noticed even when something it
    started still holds the pipe open.
    """
    state = {"buffer": b"", "current": None, "deadline": time.monotonic() + limit}

    def take(chunk: bytes) -> None:
        *lines, state["buffer"] = (state["buffer"] + chunk).split(b"\n")
        for line in lines:
            event = json.loads(line)
            if event["event"] == "start":
                state["current"] = event["id"]
            else:
                results[event["id"]] = {k: v for k, v in event.items() if k not in ("event", "id")}
                state["current"] = None
            state["deadline"] = time.monotonic() + limit

    def drain() -> bool:
        """Read what is there; False once the pipe is closed."""
        while True:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                return True
            if not chunk:
                return False
            take(chunk)

    def closed(wait: float) -> bool:
        select.select([fd], [], [], wait)
        return not drain()

    os.set_blocking(fd, False)
    # A cage is watched on every tick: over its task limit, everything it started is stopped.
    watch = cage.watch if cage is not None else None
    if supervise(proc, closed, lambda: state["deadline"], watch) == "late":
        text = MESSAGES["check_timeout"].format(limit=limit)
        return state["current"], "check_timeout", text
    code = proc.wait()  # the scorer is gone: what it wrote is read
    drain()
    if code == 0 and state["current"] is None:
        return None, None, ""
    how = describe_exit(code if cage is None else cage.exit_code(code))
    return state["current"], "check_died", MESSAGES["check_died"].format(how=how)


def main(argv: list[str]) -> int:
    answers_path, lesson, fd, *ids = argv
    with os.fdopen(int(fd), "w") as out:
        score_answers(answers_path, lesson, ids, out)
    return 0


if __name__ == "__main__":
    # Ends with os._exit: the learner's code may have left threads or atexit handlers that
    # would hang a normal exit after the results are out.
    code = main(sys.argv[1:])
    sys.stdout.flush()
    os._exit(code)
