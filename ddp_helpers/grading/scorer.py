"""Scoring a submission's answers with the grader's own checks, in scorer processes apart
from the learner's kernel: whatever the notebook did to the checks in its kernel is gone.

`python -m ddp_helpers.grading.scorer ANSWERS LESSON FD ID...` scores and writes one JSON
line per event to FD; `score()` runs such processes, a fresh one after one hangs or dies.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import select
import sys
import time

from ..procs import describe_exit, kill_descendants
from .kernel import start_logged
from .results import Event, ExerciseScore

MIN_CHECK_LIMIT = 60.0  # the rank checks have their own 30 s hang detection; let it speak

MESSAGES = {
    "check_timeout": (
        "Checking this answer did not finish within {limit:g} s (an endless loop, or a "
        "rank waiting for one that never comes?), so it was stopped."
    ),
    "check_died": "Checking this answer ended the grader's process ({how}).",
    "missing": "`{name}` is not defined in this notebook (was its cell run, or renamed?).",
    "unsendable": "`{name}` could not be taken out of the notebook: {error}",
    "unloadable": "`{name}` could not be loaded by the grader: {error}",
    "from_course": (
        "`{name}` is the course's reference answer imported from `{module}`, not code "
        "written in this notebook: write your own."
    ),
}


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


def _score_one(ex, entry) -> tuple[str, str, str | None, str | None]:
    """(status, message, hint, hidden): hidden is how the grader's extra cases went."""
    import cloudpickle

    if entry is None:
        return "missing", MESSAGES["missing"].format(name=ex.name), None, None
    kind, payload = entry
    if kind != "ok":
        return "error", MESSAGES["unsendable"].format(name=ex.name, error=payload), None, None
    try:
        answer = cloudpickle.loads(payload)
    except BaseException as exc:  # noqa: BLE001 - whatever the pickle raises is the answer's
        error = f"{type(exc).__name__}: {exc}"
        return "error", MESSAGES["unloadable"].format(name=ex.name, error=error), None, None
    module = from_course(answer)
    if module is not None:
        return "wrong", MESSAGES["from_course"].format(name=ex.name, module=module), None, None
    result = ex.grade(answer)  # the learner's check, then the grader's hidden cases
    return result.status, result.message, result.hint, result.hidden


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
        status, message, hint, hidden = _score_one(ex, found.get(ex.name))
        done = {"event": "done", "id": ex_id, "status": status, "message": message}
        done |= {"hint": hint, "hidden": hidden}
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
    """
    from ..exercises import exercises_of

    exercises = exercises_of(lesson)
    ids = [ex.id for ex in exercises]
    results: dict[str, dict] = {}
    events: list[Event] = []
    while remaining := [i for i in ids if i not in results]:
        before = _children()
        read_fd, write_fd = os.pipe()
        # -P: nothing the notebook wrote into a folder can shadow a module here.
        argv = [sys.executable, "-P", "-m", "ddp_helpers.grading.scorer"]
        argv += [answers_path, lesson, str(write_fd), *remaining]
        cwd, scorer_env = os.path.join(workdir, "score"), env
        if cage is not None:  # the checks run the learner's code: in its cage too
            argv, scorer_env = cage.command(argv, cwd), cage.env(env)
        log = os.path.join(workdir, "scorer.log")
        proc = start_logged(argv, cwd, scorer_env, log, pass_fds=(write_fd,))
        os.close(write_fd)
        try:
            stopped_in, kind, text = _read_scores(proc, read_fd, limit, results, cage)
        finally:
            os.close(read_fd)
            # The scorer, and what it started (still holding the pipe, perhaps): our new
            # children, orphans included, since this process is a subreaper.
            for pid in _children() - before:
                kill_descendants(pid, include_self=True)
            with contextlib.suppress(Exception):
                proc.wait(timeout=10)
        if kind is None:
            if all(i in results for i in remaining):
                break
            kind, text = "check_died", MESSAGES["check_died"].format(how="exit code 0")
        progressed = any(i in results for i in remaining)
        if stopped_in is None and progressed:
            continue  # it stopped between two exercises: a new scorer takes the rest
        # It hung or died in one exercise, or before scoring any: that one gets the reason.
        culprit = stopped_in or next(i for i in ids if i not in results)
        results[culprit] = {"status": "error", "message": text, "hint": None}
        events.append(Event(kind, text, exercise=culprit))
    scores = [ExerciseScore(ex.id, ex.name, ex.points, **results[ex.id]) for ex in exercises]
    return scores, events


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
                results[event["id"]] = {
                    k: event[k] for k in ("status", "message", "hint", "hidden")
                }
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

    os.set_blocking(fd, False)
    while True:
        if cage is not None:
            cage.watch()  # over its task limit, everything it started is stopped
        wait = max(0.0, min(0.2, state["deadline"] - time.monotonic()))
        select.select([fd], [], [], wait)
        open_ = drain()
        code = proc.poll()
        if not open_ or code is not None:  # the scorer is gone (what it wrote is read)
            code = proc.wait() if code is None else code
            drain()
            if code == 0 and state["current"] is None:
                return None, None, ""
            how = describe_exit(code if cage is None else cage.exit_code(code))
            return state["current"], "check_died", MESSAGES["check_died"].format(how=how)
        if time.monotonic() >= state["deadline"]:
            text = MESSAGES["check_timeout"].format(limit=limit)
            return state["current"], "check_timeout", text


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
