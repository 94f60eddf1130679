"""Scoring a submission's answers with the grader's own checks, in scorer processes apart
from the learner's kernel: whatever the notebook did to the checks in its kernel is gone.

The learner's code never runs in a scorer: each answer stays the bytes the kernel pickled
(an Answer), looked at without being loaded, and is loaded only on the ranks a check runs
it on (exercises.running: run_on_ranks, run_answer), whose values come back as plain data. What a
scorer writes is read by the worker as claims to check: only lines for the exercises asked
for, with the statuses and mistake keys each exercise has, each field capped.

The scorer decides the grade, so it stays out of the ranks' reach. It runs outside the
submission's sandbox; the launcher's helper that forks the ranks is started inside it (its
cgroups, limits and bubblewrap: client.confine), so a rank, whatever code it runs, is in
another PID namespace and sees neither the scorer nor the worker: it cannot signal, trace
or open them, nor their pipes through /proc. The scorer is also undumpable (no process of
its user may read its memory or fds, where there is no sandbox), and each line it writes
carries a seal the worker gave it on its stdin alone: a line without it is refused.

`python -m ddp_helpers.grading.worker.scorer ANSWERS LESSON FD ID...` reads {"seal", "confine"}
as JSON on its stdin, scores and writes one sealed JSON line per event to FD; `score()` runs
such processes, a fresh one after one hangs or dies.
"""

from __future__ import annotations

import hmac
import json
import os
import pickletools
import secrets
import select
import sys
import tempfile
import time

from ...entry_points import SCORER
from ...exercises import LESSONS, builds_ddp, exercises_of
from ...exercises.answer import Answer
from ...exercises.verdicts import CheckStatus, Hidden
from ...files import TooBig, read_capped, remove_tree
from ...launcher import client
from ...launcher.plain import load_restricted
from ...procs import Reaper, describe_exit, supervise, undumpable
from ..folders import WorkFolders
from ..results import Event, ExerciseScore
from ..words import GRADER, GRADER_KEYS
from .kernel import cap, start_logged

ANSWERS_LIMIT = 256 << 20  # bytes of answers a scorer reads (a function and what it holds)
LINE_LIMIT = 1 << 20  # bytes of one line a scorer writes (each field is capped well below)
MESSAGE = 8000  # characters of a message or hint kept
FIELD = 500  # characters of a field of a mistake's title


def load_answers(path: str) -> tuple[dict, str | None]:
    """The answers file the kernel wrote: name -> ("ok", pickled bytes) or ("error", why),
    and why it could not be read (None if it could). Read as a file a learner could have
    replaced (files.py), loaded with no class or function allowed: only its shape counts."""
    try:
        data = read_capped(path, ANSWERS_LIMIT)
    except FileNotFoundError:
        return {}, None
    except TooBig as exc:
        return {}, GRADER["too_big"].format(size=exc.size, limit=ANSWERS_LIMIT)
    except OSError as exc:
        return {}, GRADER["unreadable"].format(error=exc)
    try:
        found = load_restricted(data, {})  # no class or function allowed
    except Exception:  # noqa: BLE001 - anything but the dict the probe writes
        return {}, GRADER["malformed"]
    if not isinstance(found, dict):
        return {}, GRADER["malformed"]
    answers = {
        name: entry
        for name, entry in found.items()
        if type(name) is str
        and type(entry) is tuple
        and len(entry) == 2
        and (entry[0], type(entry[1])) in (("ok", bytes), ("error", str))
    }
    return answers, None


def course_global(payload: bytes, references: set[tuple[str, str]]) -> bool:
    """Whether a pickled answer names one of the course's references as a global (the
    reference itself, an alias of it, or inside a functools.partial): read from the pickle's
    opcodes, nothing loaded. A wrapper that calls the reference, or its code re-homed, is
    found where the check runs it (exercises.tripwire.in_rank)."""
    pushed: list[str | None] = []  # what each op pushed: its string, or None for another value
    memo: dict[int, str | None] = {}
    try:
        for op, arg, _ in pickletools.genops(payload):
            if op.name == "MEMOIZE":  # memoizes the top of the stack at the next index
                memo[len(memo)] = pushed[-1] if pushed else None
            elif op.name in ("PUT", "BINPUT", "LONG_BINPUT"):
                memo[arg] = pushed[-1] if pushed else None
            elif op.name in ("GET", "BINGET", "LONG_BINGET"):
                pushed.append(memo.get(arg))
            elif op.name == "GLOBAL" and tuple(arg.split(" ", 1)) in references:
                return True
            elif op.name == "STACK_GLOBAL" and tuple(pushed[-2:]) in references:
                return True
            else:
                pushed.append(arg if isinstance(arg, str) and "UNICODE" in op.name else None)
    except Exception:  # noqa: BLE001 - a malformed pickle fails where it is loaded
        return False
    return False


def _references() -> set[tuple[str, str]]:
    return {
        name for lesson in LESSONS for ex in exercises_of(lesson) for name in ex.reference_names()
    }


def _grader_found(status: CheckStatus, mistake: str, **fields) -> dict:
    """A result the grader gives without the check: one of its own mistakes."""
    return {"status": status, "message": GRADER[mistake].format(**fields), "mistake": mistake}


def _score_one(ex, entry, unreadable: str | None, references) -> dict:
    """The fields of the exercise's ExerciseScore (less its id, name and points)."""
    if unreadable is not None:
        return _grader_found(CheckStatus.ERROR, "unloadable", name=ex.name, error=unreadable)
    if entry is None:
        return _grader_found(CheckStatus.MISSING, "missing", name=ex.name)
    kind, payload = entry
    if kind != "ok":
        return _grader_found(CheckStatus.ERROR, "unsendable", name=ex.name, error=payload)
    if course_global(payload, references):
        result = ex.from_course()
    else:
        result = ex.grade(Answer(pickled=payload))  # the learner's check, then the hidden cases
    return {
        "status": result.status,
        "message": result.message,
        "hint": result.hint,
        "hidden": result.hidden,
        "mistake": result.mistake,
        "fields": result.title_fields,
    }


def score_answers(answers_path: str, lesson: str, ids: list[str], out, seal: str = "") -> None:
    """In the scorer process: each exercise's result as JSON lines on `out`, each after
    `seal` and a space."""
    exercises = {ex.id: ex for ex in exercises_of(lesson)}
    found, unreadable = load_answers(answers_path)
    if any(kind == "ok" for kind, _ in found.values()):
        if builds_ddp(lesson):
            client.expect_ddp()  # the checks build DDP models: the helper warms up for them
        client.start()  # the launcher imports torch while the checks get ready
    references = _references()
    for ex_id in ids:
        ex = exercises[ex_id]
        out.write(f"{seal} {json.dumps({'event': 'start', 'id': ex_id})}\n")
        out.flush()
        fields = _score_one(ex, found.get(ex.name), unreadable, references)
        out.write(f"{seal} {json.dumps({'event': 'done', 'id': ex_id, **fields})}\n")
        out.flush()


def score(
    folders: WorkFolders, lesson: str, env: dict, limit, cage=None
) -> tuple[list[ExerciseScore], list[Event]]:
    """Every exercise of the lesson scored, and what went wrong on the way (a hang, a crash).

    `limit`: the seconds each exercise's check may run, as a function of the exercise
    (TimeBudget.check) or one figure for all.

    An answer that hangs or kills its scorer costs that exercise only: a new scorer takes
    the rest. The caller is a subreaper, so whatever a scorer started is found and killed.
    `env` is the scorers' whole environment (the worker's is sandbox.Cage.env).
    """
    exercises = exercises_of(lesson)
    asked = {ex.id: ex for ex in exercises}
    limits = {ex.id: limit(ex) if callable(limit) else float(limit) for ex in exercises}
    results: dict[str, dict] = {}
    events: list[Event] = []
    while remaining := [i for i in asked if i not in results]:
        stopped_in, kind, text = _run_scorer(folders, lesson, remaining, env, limits, results, cage)
        if kind is None:
            if all(i in results for i in remaining):
                break
            kind, text = "check_died", GRADER["check_died"].format(how=describe_exit(0))
        progressed = any(i in results for i in remaining)
        if stopped_in is None and progressed:
            continue  # it stopped between two exercises: a new scorer takes the rest
        # It hung or died in one exercise, or before scoring any: that one gets the reason.
        culprit = stopped_in or next(i for i in asked if i not in results)
        results[culprit] = {"status": CheckStatus.ERROR, "message": text, "mistake": kind}
        events.append(Event(kind, text, exercise=culprit))
    scores = [ExerciseScore(ex.id, ex.name, ex.points, **results[ex.id]) for ex in exercises]
    return scores, events


def _run_scorer(folders: WorkFolders, lesson, ids, env, limits, results, cage) -> tuple:
    """One scorer process for `ids`, its results put into `results`: (exercise, kind, why)
    if it hung, died or said what it may not, else (None, None, ""). Nothing it started is
    left."""
    reaper = Reaper(orphans=True)  # what it leaves may outlive it: our children, as orphans
    read_fd, write_fd = os.pipe()
    # -P: nothing the notebook wrote into a folder can shadow a module here.
    argv = [sys.executable, "-P", "-m", SCORER]
    argv += [folders.answers, lesson, str(write_fd), *ids]
    seal = secrets.token_hex(16)
    # The checks' folders (their TMPDIR, the scorer's and its ranks' working folder): new,
    # out of the box, so that nothing the notebook made stands in for it (a link in place
    # of box/tmp would have the scorer make them wherever it points).
    checks = tempfile.mkdtemp(prefix="checks-", dir=folders.root)
    env = {**env, "TMPDIR": checks}
    # The checks run the learner's code on ranks: the helper that forks them, in its cage.
    confine = [] if cage is None else cage.command([], checks, writable=[checks])
    settings = _settings({"seal": seal, "confine": confine})
    try:
        proc = reaper.proc = start_logged(
            argv, checks, env, folders.scorer_log, pass_fds=(write_fd,), stdin=settings
        )
    finally:
        os.close(write_fd)
        os.close(settings)
    asked = {ex.id: ex for ex in exercises_of(lesson) if ex.id in ids}
    try:
        return _read_scores(proc, read_fd, limits, results, asked, cage, seal.encode())
    finally:
        os.close(read_fd)
        reaper.reap()
        remove_tree(checks)


def _settings(settings: dict) -> int:
    """A pipe's read end holding the scorer's settings (its stdin): never in its argv or
    environment, which /proc shows. A few hundred bytes: the pipe holds them unread."""
    read_fd, write_fd = os.pipe()
    try:
        os.write(write_fd, json.dumps(settings).encode())
    finally:
        os.close(write_fd)
    return read_fd


class BadLine(ValueError):
    """A scorer's line that is not one the grader takes: the reason, in English words."""


def checked_result(event, ex) -> dict:
    """A scorer's "done" line for exercise `ex`, as the fields of its ExerciseScore: only
    the statuses, hidden states and mistake keys there are (the exercise's own, the ranks',
    the core's, the grader's), every string capped; else BadLine."""
    for name in ("status", "mistake", "hidden"):  # text or nothing, before any is looked up
        if event.get(name) is not None and type(event.get(name)) is not str:
            raise BadLine(f"{name} of type {type(event.get(name)).__name__}")
    status, mistake = event.get("status"), event.get("mistake")
    if status not in set(CheckStatus):
        raise BadLine(f"status {cap(status, 40)!r}")
    if (mistake is None) != (status == CheckStatus.CORRECT):
        raise BadLine(f"mistake {cap(mistake, 40)!r} with status {status}")
    if mistake is not None and mistake not in ex.mistake_keys | GRADER_KEYS:
        raise BadLine(f"mistake {cap(mistake, 40)!r}, which exercise {ex.id} does not have")
    hidden, hint, fields = event.get("hidden"), event.get("hint"), event.get("fields") or {}
    if hidden is not None and hidden not in set(Hidden):
        raise BadLine(f"extra cases {cap(hidden, 40)!r}")
    if not isinstance(event.get("message", ""), str) or not isinstance(hint, (str, type(None))):
        raise BadLine("a message that is not text")
    if not isinstance(fields, dict) or len(fields) > 20:
        raise BadLine("fields that are not a few names and values")
    return {
        "status": status,
        "mistake": mistake,
        "message": cap(event.get("message", ""), MESSAGE),
        "hint": None if hint is None else cap(hint, MESSAGE),
        "hidden": hidden,
        "fields": {cap(k, 40): cap(v, FIELD) for k, v in fields.items()},
    }


def _take_line(line: bytes, state: dict, results: dict, asked: dict, seal: bytes = b"") -> None:
    """One line of a scorer into `state` (the exercise it is in) and `results`; BadLine if
    it lacks the scorer's seal, or is not a start or a result of an exercise asked for, in
    order."""
    mark, _, body = line.partition(b" ")
    if not hmac.compare_digest(mark, seal):
        raise BadLine("a line without this scorer's seal")
    try:
        event = json.loads(body)
    except (ValueError, RecursionError):
        raise BadLine("a line that is not JSON") from None
    if not isinstance(event, dict) or type(event.get("id")) is not str or event["id"] not in asked:
        raise BadLine("a line for no exercise it was asked to check")
    ex_id, current = event["id"], state["current"]
    if event.get("event") == "start" and current is None and ex_id not in results:
        state["current"] = ex_id
    elif event.get("event") == "done" and current == ex_id:
        results[ex_id] = checked_result(event, asked[ex_id])
        state["current"] = None
    else:
        raise BadLine(f"{cap(event.get('event'), 20)!r} for exercise {ex_id} out of turn")


def _read_scores(
    proc, fd: int, limits, results: dict, asked: dict, cage=None, seal: bytes = b""
) -> tuple:
    """Read the scorer's lines into results: (exercise, kind, why) if it hung, died or said
    what it may not (BadLine: then it is stopped).

    `limits`: seconds by exercise id (or one figure). The limit runs from the scorer's start
    and from each line it writes: the exercise's own once it has started one, the longest
    between two, so a scorer that hangs there is stopped too; its exit is noticed even when
    something it started still holds the pipe open.
    """
    if not isinstance(limits, dict):
        limits = dict.fromkeys(asked, float(limits))
    between = max(limits[i] for i in asked)

    def limit() -> float:
        return limits[state["current"]] if state["current"] is not None else between

    state = {"buffer": b"", "current": None, "deadline": time.monotonic() + between}

    def take(chunk: bytes) -> None:
        *lines, state["buffer"] = (state["buffer"] + chunk).split(b"\n")
        if len(state["buffer"]) > LINE_LIMIT or any(len(x) > LINE_LIMIT for x in lines):
            raise BadLine(f"a line over {LINE_LIMIT} bytes")
        for line in lines:
            _take_line(line, state, results, asked, seal)
            state["deadline"] = time.monotonic() + limit()

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
    try:
        if supervise(proc, closed, lambda: state["deadline"], watch) == "late":
            text = GRADER["check_timeout"].format(limit=limit())
            return state["current"], "check_timeout", text
        code = proc.wait()  # the scorer is gone: what it wrote is read
        drain()
    except BadLine as exc:
        return state["current"], "check_bad_line", GRADER["check_bad_line"].format(why=exc)
    if code == 0 and state["current"] is None:
        return None, None, ""
    how = describe_exit(code if cage is None else cage.exit_code(code))
    return state["current"], "check_died", GRADER["check_died"].format(how=how)


def main(argv: list[str]) -> int:
    undumpable()  # first: nothing of this user's may read the seal or reopen the pipe
    answers_path, lesson, fd, *ids = argv
    os.set_inheritable(int(fd), False)  # no program a check starts gets the result pipe
    settings = json.loads(sys.stdin.read())

    client.confine(settings["confine"])
    with os.fdopen(int(fd), "w") as out:
        score_answers(answers_path, lesson, ids, out, settings["seal"])
    return 0


if __name__ == "__main__":
    # Ends with os._exit: the learner's code may have left threads or atexit handlers that
    # would hang a normal exit after the results are out.
    code = main(sys.argv[1:])
    sys.stdout.flush()
    os._exit(code)
