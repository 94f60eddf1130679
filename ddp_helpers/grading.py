"""Instructors' grading: `python -m ddp_helpers grade PATH... --out grades.csv` (any lesson).

Each submission is graded by its own worker process (_grade_worker.py): a fresh kernel
runs the notebook under a wall-clock limit, and a separate scorer process checks the
answers with the grader's own copy of the checks. This module finds the submissions,
tells their lessons, runs the workers N at a time, and writes the CSV, the feedback files,
the progress and the summary.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ._grade_worker import (
    KERNEL_START_LIMIT,
    MIN_CHECK_LIMIT,
    _signal_name,
    kill_descendants,
    read_notebook,
)
from .exercises import LESSONS, exercises_of
from .launcher import with_this_package

STATUSES = ("ok", "timeout", "error", "invalid")
DEFAULT_TIMEOUT = 300.0
_IMPORT = re.compile(r"\bddp_helpers\.exercises(?:\s+import\s+|\.)lesson(\d\d)\b")
_IMPORT_AS_EX = re.compile(r"\bddp_helpers\.exercises\s+import\s+lesson(\d\d)\s+as\s+ex\b")

# Instructor- and learner-facing text of this module, in one place for translation.
MESSAGES = {
    "no_path": "No such file or folder: {path}. Give notebooks or folders of them.",
    "no_notebooks": (
        "No notebooks (*.ipynb) found in {paths}. Give the folder the submissions were "
        "collected into, or the notebook files themselves."
    ),
    "not_notebook": (
        "This file is not a Jupyter notebook ({error}). Submit the .ipynb file you worked "
        "in (JupyterLab: File > Download)."
    ),
    "no_lesson": (
        "This notebook is not one of the course's lessons: no cell imports the checks "
        "(`from ddp_helpers.exercises import lessonNN as ex`). Submit the lesson notebook "
        "you worked in."
    ),
    "many_lessons": (
        "This notebook imports the checks of several lessons ({lessons}) and neither its "
        "`... import lessonNN as ex` line nor its file name says which lesson it is; "
        "submit one lesson per notebook."
    ),
    "unknown_lesson": "This notebook imports lesson {lesson}, which this course does not have.",
    "name_mismatch": (
        "Wrong lesson: the file is named like lesson {named} but holds lesson {found}'s "
        "notebook. Submit lesson {named}'s notebook under this name."
    ),
    "wrong_lesson": (
        "Wrong lesson: this is lesson {found}'s notebook but lesson {wanted} was asked for."
    ),
    "worker_failed": (
        "The grader itself failed on this submission (exit status {code}); please report "
        "it with this output:\n{output}"
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
    "start": ("Grading {count} submission{s}, {jobs} at a time; each notebook may run {limit:g} s"),
    "line": "[{done:>{width}}/{total}] {status:<8} {points:>5}  {seconds:5.1f} s  {submission}",
    "retrying": (
        "{count} submission{s} ran past the limit while others were being graded; "
        "grading {them} again, one at a time, so that a busy machine cannot cost points"
    ),
    "retried": (
        "The first try was stopped at its time limit ({first:.1f} s in all) while {others} "
        "other submission{s} shared the machine, so it was graded again alone; this is "
        "the result of that second try."
    ),
    "not_retried": (
        "This notebook ran past the limit while other submissions shared the machine; the "
        "batch was interrupted before it could be graded again alone."
    ),
    "summary_head": (
        "Graded {count} submission{s} in {wall:.0f} s ({per:.1f} s per notebook run, "
        "{jobs} at a time)."
    ),
    "summary_status": "status: {counts}",
    "summary_means": "mean points per exercise (submissions that ran):",
    "summary_mean": "  {column:<32} {mean:.2f} of {max}  (n={n})",
    "wrote": "grades: {out}{feedback}",
    "feedback": {
        "title": "# Feedback: `{name}`",
        "invalid": "**Status: invalid.** This file could not be graded.",
        "score": (
            "Lesson {lesson} · **{points} of {max_points} points** · status **{status}** · "
            "graded in {seconds:.1f} s (limit {limit:g} s for the notebook)"
        ),
        "status": {
            "ok": "The notebook ran to its end.",
            "timeout": (
                "The notebook, or one of its answers, ran past the time limit and was stopped."
            ),
            "error": "The notebook's kernel, or the grader's process running an answer, died.",
        },
        "table": "| exercise | points | result |",
        "hint": "💡 Hint: {hint}",
        "happened": "## What happened",
        "cell_errors": "## Cells that raised an error",
        "more_errors": "(and {count} more)",
        "times": "Times: notebook {run:.1f} s, checks {checks:.1f} s.",
    },
    "feedback_failed": "warning: could not write the feedback of {name}: {error}",
    "interrupted": (
        "Interrupted: {done} of {total} graded; {out} holds those rows. Everything the "
        "unfinished submissions started was stopped."
    ),
}


class GradingError(Exception):
    """Bad input to the grader as a whole (no such path, no notebooks)."""


@dataclass
class Submission:
    path: Path
    name: str  # as shown in the CSV: the path as given, relative where it can be
    lesson: str | None = None
    problem: str | None = None  # why it is invalid


@dataclass
class Row:
    submission: Submission
    status: str
    points: int = 0
    max_points: int | None = None
    exercises: list[dict] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    run_seconds: float | None = None
    score_seconds: float | None = None


# ---------------------------------------------------------------- finding submissions


def lesson_of(path) -> tuple[str | None, str | None]:
    """(lesson, None) for a lesson notebook, or (lesson or None, why it is invalid)."""
    try:
        nb = read_notebook(path)
    except (OSError, ValueError) as exc:
        return None, MESSAGES["not_notebook"].format(error=exc)
    found = sorted(
        {m for c in nb.cells if c.cell_type == "code" for m in _IMPORT.findall(c.source)}
    )
    if not found:
        return None, MESSAGES["no_lesson"]
    # A file named like one of the course's notebooks must hold that lesson.
    named = [n for n, slug in LESSONS.items() if slug in Path(path).name]
    if len(found) > 1:
        # A lesson may import another's checks (to run an old one again): the lesson is
        # the one imported `as ex`, as every lesson does, or else the one its name says.
        as_ex = sorted(
            {m for c in nb.cells if c.cell_type == "code" for m in _IMPORT_AS_EX.findall(c.source)}
        )
        chosen = as_ex if len(as_ex) == 1 else [n for n in named if n in found]
        if len(chosen) != 1:
            return None, MESSAGES["many_lessons"].format(lessons=", ".join(found))
        found = chosen
    lesson = found[0]
    if lesson not in LESSONS:
        return None, MESSAGES["unknown_lesson"].format(lesson=lesson)
    if named and lesson not in named:
        return lesson, MESSAGES["name_mismatch"].format(named=named[0], found=lesson)
    return lesson, None


def find_submissions(paths, lesson: str | None = None) -> list[Submission]:
    """Every notebook in paths (folders searched), each with its lesson or why it is invalid."""
    files: dict[Path, str] = {}
    for given in paths:
        path = Path(given)
        if path.is_dir():
            for nb in sorted(path.rglob("*.ipynb")):
                if ".ipynb_checkpoints" not in nb.parts and nb.is_file():
                    files.setdefault(nb.resolve(), _shown(nb))
        elif path.is_file():
            files.setdefault(path.resolve(), _shown(path))
        else:
            raise GradingError(MESSAGES["no_path"].format(path=given))
    if not files:
        raise GradingError(MESSAGES["no_notebooks"].format(paths=", ".join(map(str, paths))))
    subs = []
    for resolved, shown in sorted(files.items(), key=lambda item: item[1]):
        found, problem = lesson_of(resolved)
        if problem is None and lesson is not None and found != lesson:
            problem = MESSAGES["wrong_lesson"].format(found=found, wanted=lesson)
        subs.append(Submission(resolved, shown, found, problem))
    return subs


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def columns_for(subs: list[Submission]) -> list[tuple[str, str]]:
    """(lesson, column name) of every exercise of the lessons in the batch, in order."""
    lessons = sorted({s.lesson for s in subs if s.lesson and s.problem is None})
    return [(lesson, f"{ex.id} {ex.name}") for lesson in lessons for ex in exercises_of(lesson)]


# ---------------------------------------------------------------- one submission


def _invalid_row(sub: Submission) -> Row:
    return Row(sub, "invalid", events=[{"kind": "invalid", "text": sub.problem}])


def grade_one(
    sub: Submission,
    timeout: float,
    cancel: threading.Event | None = None,
    tmp_root: str | None = None,
) -> Row:
    """Grade one submission in a worker process; always returns its Row, never raises."""
    if sub.problem is not None:
        return _invalid_row(sub)
    started = time.monotonic()
    exercises = exercises_of(sub.lesson)
    max_points = sum(ex.points for ex in exercises)
    # Backstop only: the worker enforces the limits itself and reports on them.
    limit = KERNEL_START_LIMIT + timeout + len(exercises) * max(timeout, MIN_CHECK_LIMIT) + 120
    try:
        result, failure = _run_worker(sub, timeout, limit, cancel, tmp_root)
    except Exception as exc:  # noqa: BLE001 - the grader's own trouble costs this row only
        result = None
        failure = MESSAGES["grader_raised"].format(error=f"{type(exc).__name__}: {exc}")
    seconds = time.monotonic() - started
    if result is None:
        rows = [
            {"id": ex.id, "name": ex.name, "max": ex.points, "points": 0, "status": "error"}
            for ex in exercises
        ]
        events = [{"kind": "grader", "text": failure}]
        return Row(sub, "error", 0, max_points, rows, events, seconds)
    for ex in result["exercises"]:
        ex["points"] = ex["max"] if ex["status"] == "correct" else 0
    return Row(
        sub,
        result["status"],
        sum(ex["points"] for ex in result["exercises"]),
        max_points,
        result["exercises"],
        result["events"],
        seconds,
        result["run_seconds"],
        result["score_seconds"],
    )


def _run_worker(sub, timeout, limit, cancel, tmp_root) -> tuple:
    """(the worker's result, None) or (None, why there is none); nothing it started survives."""
    env = with_this_package(dict(os.environ))
    if tmp_root is not None:
        env["TMPDIR"] = tmp_root  # the worker's folder is made in the batch's own
    env["DDP_HELPERS_GRADER_PID"] = str(os.getpid())
    proc = subprocess.Popen(
        [sys.executable, "-P", "-m", "ddp_helpers._grade_worker", "run"]
        + [str(sub.path), sub.lesson, repr(float(timeout))],
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
            return json.loads(out.decode(errors="replace").strip().splitlines()[-1]), None
        except (IndexError, json.JSONDecodeError):
            if proc.returncode < 0:  # killed from outside: the out-of-memory killer, or a person
                return None, MESSAGES["worker_killed"].format(how=_signal_name(proc.returncode))
            tail = "\n".join(err.decode(errors="replace").strip().splitlines()[-20:])
            return None, MESSAGES["worker_failed"].format(code=proc.returncode, output=tail)
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


# ---------------------------------------------------------------- the batch


def grade(
    paths,
    out="grades.csv",
    feedback=None,
    timeout: float = DEFAULT_TIMEOUT,
    jobs: int = 1,
    lesson: str | None = None,
    stream=None,
) -> list[Row]:
    """Grade every submission in paths; write the CSV (and feedback); return the rows.

    The rows come back in submission order. A submission that runs past the limit while
    others are graded beside it (jobs > 1) is graded again alone once the rest are done:
    on a busy machine a fair verdict needs a run of its own.
    """
    import shutil
    import tempfile

    stream = sys.stderr if stream is None else stream
    subs = find_submissions(paths, lesson)
    columns = columns_for(subs)
    names = feedback_names(subs)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if feedback is not None:
        Path(feedback).mkdir(parents=True, exist_ok=True)
    progress = Progress(len(subs), stream)
    count = len(subs)
    progress.say(
        MESSAGES["start"].format(count=count, s="" if count == 1 else "s", jobs=jobs, limit=timeout)
    )
    started = time.monotonic()
    rows: list[Row] = []
    fatal: list[BaseException] = []
    cancel = threading.Event()
    lock = threading.Condition()
    pending = [s for s in subs if s.problem is None]
    crowd: dict[str, int] = {}  # submission being graded -> most graded at once during its run
    first_tries: dict[str, tuple[Row, int]] = {}  # timed out in a crowd: (row, crowd size)
    handlers = _interrupt_handlers()  # put back at the end: Ctrl-C ignores them meanwhile
    # Every worker's folder is made in this one, which goes at the end whatever happens.
    tmp_root = tempfile.mkdtemp(prefix="ddp-grade-batch-")

    def finished(row: Row) -> None:
        rows.append(row)
        writer.write(row)  # an OSError here (disk full) ends the batch: see `fatal`
        if feedback is not None:
            try:
                write_feedback(row, Path(feedback) / names[row.submission.name], timeout)
            except OSError as exc:
                progress.say(
                    MESSAGES["feedback_failed"].format(name=row.submission.name, error=exc)
                )
        progress.finished(row)

    def work():
        while not cancel.is_set():
            with lock:
                if not pending:
                    return
                sub = pending.pop(0)
                crowd[sub.name] = 0
                for name in crowd:
                    crowd[name] = max(crowd[name], len(crowd))
                progress.running = len(crowd)
            row = grade_one(sub, timeout, cancel, tmp_root)
            with lock:
                peak = crowd.pop(sub.name)
                progress.running = len(crowd)
                try:
                    if cancel.is_set():
                        pass
                    elif row.status == "timeout" and peak > 1:
                        # Others shared the CPUs: a fair verdict needs a run on its own
                        # (which the second phase, one at a time, gives).
                        first_tries[sub.name] = (row, peak)
                    else:
                        if sub.name in first_tries:
                            first, peak = first_tries[sub.name]
                            others = peak - 1
                            note = MESSAGES["retried"].format(
                                first=first.seconds,
                                others=others,
                                s="" if others == 1 else "s",
                            )
                            row.events.insert(0, {"kind": "retried", "text": note})
                            row.seconds += first.seconds
                        finished(row)
                except BaseException as exc:  # noqa: BLE001 - reported by the main thread
                    fatal.append(exc)
                    cancel.set()
                lock.notify_all()

    def run_workers(count: int) -> None:
        threads: list[threading.Thread] = []
        try:
            for _ in range(count):
                threads.append(threading.Thread(target=work, daemon=True))
                threads[-1].start()
            while any(t.is_alive() for t in threads):
                with lock:
                    lock.wait(timeout=1.0)
                    progress.tick()
        except KeyboardInterrupt:
            _ignore_interrupts()  # a second Ctrl-C must not cut the clean-up short
            cancel.set()
            for t in threads:
                t.join()
            raise

    try:
        with CsvWriter(out, columns) as writer:
            for sub in subs:  # invalid ones need no kernel: their rows come first
                if sub.problem is not None:
                    finished(_invalid_row(sub))
            try:
                run_workers(max(1, jobs))
                if first_tries and not cancel.is_set():
                    again = len(first_tries)
                    pending[:] = [s for s in subs if s.name in first_tries]
                    progress.say(
                        MESSAGES["retrying"].format(
                            count=again,
                            s="" if again == 1 else "s",
                            them="it" if again == 1 else "them",
                        )
                    )
                    run_workers(1)
            except KeyboardInterrupt:
                _ignore_interrupts()  # also when Ctrl-C came between the two phases
                cancel.set()
                graded = {r.submission.name for r in rows}
                for name, (row, _) in first_tries.items():  # keep what the first try found
                    if name not in graded:
                        row.events.insert(0, {"kind": "retried", "text": MESSAGES["not_retried"]})
                        finished(row)
                writer.finish(rows, subs)
                progress.done()
                progress.say(MESSAGES["interrupted"].format(done=len(rows), total=count, out=out))
                raise
            writer.finish(rows, subs)
    finally:
        shutil.rmtree(tmp_root, ignore_errors=True)
        _restore_handlers(handlers)
    if fatal:
        raise fatal[0]
    progress.done()
    for line in summary(rows, columns, time.monotonic() - started, jobs):
        progress.say(line)
    shown = f" · feedback: {feedback}/ ({len(rows)} files)" if feedback is not None else ""
    progress.say(MESSAGES["wrote"].format(out=out, feedback=shown))
    return _in_order(rows, subs)


def _in_order(rows: list[Row], subs: list[Submission]) -> list[Row]:
    """rows sorted as their submissions were given."""
    order = {s.name: i for i, s in enumerate(subs)}
    return sorted(rows, key=lambda r: order[r.submission.name])


def _interrupt_handlers() -> dict:
    """The handlers of Ctrl-C, SIGTERM and SIGHUP now (none outside the main thread)."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}


def _ignore_interrupts() -> None:
    import signal

    for sig in _interrupt_handlers():
        signal.signal(sig, signal.SIG_IGN)


def _restore_handlers(handlers: dict) -> None:
    import signal

    for sig, handler in handlers.items():
        if handler is not None:  # None: set outside Python, cannot be put back
            signal.signal(sig, handler)


class CsvWriter:
    """grades.csv: a row as each submission finishes, in submission order at the end."""

    def __init__(self, path: Path, columns):
        self.path = path
        self.columns = columns

    def __enter__(self):
        self.file = open(self.path, "w", newline="", encoding="utf-8")  # noqa: SIM115
        self.csv = csv.writer(self.file)
        self.csv.writerow(self.header())
        self.file.flush()
        return self

    def __exit__(self, *exc):
        if not self.file.closed:
            self.file.close()

    def header(self) -> list[str]:
        return ["submission", "lesson", "status", "points", "max_points"] + [
            name for _, name in self.columns
        ]

    def cells(self, row: Row) -> list:
        earned = {f"{e['id']} {e['name']}": e.get("points", 0) for e in row.exercises}
        graded = row.status != "invalid"
        return [
            row.submission.name,
            row.submission.lesson or "",
            row.status,
            row.points,
            row.max_points if row.max_points is not None else "",
        ] + [earned.get(name, "") if graded else "" for _, name in self.columns]

    def write(self, row: Row) -> None:
        self.csv.writerow(self.cells(row))
        self.file.flush()

    def finish(self, rows: list[Row], subs: list[Submission]) -> None:
        """Rewrite the file in submission order (atomically: a crash keeps the rows so far)."""
        self.file.close()
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "w", newline="", encoding="utf-8") as f:
            out = csv.writer(f)
            out.writerow(self.header())
            for row in _in_order(rows, subs):
                out.writerow(self.cells(row))
        os.replace(tmp, self.path)


def summary(rows: list[Row], columns, wall: float, jobs: int) -> list[str]:
    """The end-of-batch lines: counts per status, mean points per exercise."""
    count = len(rows)
    ran = [r for r in rows if r.status != "invalid"]  # the invalid ones take no time
    lines = [
        MESSAGES["summary_head"].format(
            count=count,
            s="" if count == 1 else "s",
            wall=wall,
            per=(sum(r.seconds for r in ran) / len(ran)) if ran else 0.0,
            jobs=jobs,
        )
    ]
    counts = {s: sum(r.status == s for r in rows) for s in STATUSES}
    lines.append(
        MESSAGES["summary_status"].format(counts=" · ".join(f"{s} {n}" for s, n in counts.items()))
    )
    if columns:
        lines.append(MESSAGES["summary_means"])
    for lesson, column in columns:
        earned = [
            (e["points"], e["max"])
            for r in rows
            if r.status != "invalid" and r.submission.lesson == lesson
            for e in r.exercises
            if f"{e['id']} {e['name']}" == column
        ]
        if earned:
            mean = sum(p for p, _ in earned) / len(earned)
            lines.append(
                MESSAGES["summary_mean"].format(
                    column=column, mean=mean, max=earned[0][1], n=len(earned)
                )
            )
    return lines


class Progress:
    """A line per finished submission; on a terminal, a bar below them as well."""

    def __init__(self, total: int, stream):
        self.total, self.stream, self.done_count, self.running = total, stream, 0, 0
        self.started = time.monotonic()
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.counts = dict.fromkeys(STATUSES, 0)

    def say(self, text: str) -> None:
        self._clear()
        print(text, file=self.stream, flush=True)

    def finished(self, row: Row) -> None:
        self.done_count += 1
        self.counts[row.status] += 1
        points = f"{row.points}/{row.max_points}" if row.max_points is not None else "-"
        self._clear()
        print(
            MESSAGES["line"].format(
                done=self.done_count,
                width=len(str(self.total)),
                total=self.total,
                status=row.status,
                points=points,
                seconds=row.seconds,
                submission=row.submission.name,
            ),
            file=self.stream,
            flush=True,
        )
        self.tick()

    def bar(self, width: int = 30) -> str:
        filled = round(width * self.done_count / self.total) if self.total else width
        counts = " ".join(f"{s} {n}" for s, n in self.counts.items() if n)
        return (
            f"[{'#' * filled}{'.' * (width - filled)}] {self.done_count}/{self.total} "
            f"· {self.running} running · {time.monotonic() - self.started:.0f} s"
            + (f" · {counts}" if counts else "")
        )

    def tick(self) -> None:
        if self.tty:
            self.stream.write("\r\x1b[K" + self.bar())
            self.stream.flush()

    def _clear(self) -> None:
        if self.tty:
            self.stream.write("\r\x1b[K")

    def done(self) -> None:
        self._clear()


# ---------------------------------------------------------------- feedback


def feedback_names(subs: list[Submission]) -> dict[str, str]:
    """Each submission's feedback file: its shown path, flattened, as .md; unique, short."""
    import hashlib

    names: dict[str, str] = {}
    taken: set[str] = set()
    for sub in subs:
        stem = sub.name[: -len(".ipynb")] if sub.name.endswith(".ipynb") else sub.name
        stem = re.sub(r"[\\/]+", "__", stem.lstrip("./"))
        stem = re.sub(r"[^\w.\-]+", "_", stem)
        if len(stem) > 120 or stem.lower() in taken:  # too long for a file name, or a clash
            digest = hashlib.sha1(sub.name.encode()).hexdigest()[:8]
            stem = f"{stem[:110]}-{digest}"
        taken.add(stem.lower())
        names[sub.name] = stem + ".md"
    return names


def write_feedback(row: Row, path: Path, timeout: float) -> Path:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(feedback_markdown(row, timeout), encoding="utf-8")
    os.replace(tmp, path)
    return path


_MARK = {"correct": "✅", "wrong": "❌", "error": "💥", "not_attempted": "⏳", "missing": "❔"}


def feedback_markdown(row: Row, timeout: float) -> str:
    """The learner's feedback: score, each exercise's message and hint, what happened."""
    from .exercises._core import MESSAGES as CHECK_MESSAGES

    text, sub = MESSAGES["feedback"], row.submission
    out = [text["title"].format(name=sub.name), ""]
    if row.status == "invalid":
        out += [text["invalid"], "", sub.problem or "", ""]
        return "\n".join(out)
    out += [
        text["score"].format(
            lesson=sub.lesson,
            points=row.points,
            max_points=row.max_points,
            status=row.status,
            seconds=row.seconds,
            limit=timeout,
        ),
        "",
        text["status"][row.status],
        "",
        text["table"],
        "| --- | --- | --- |",
    ]
    names = CHECK_MESSAGES["status_names"]
    for ex in row.exercises:
        out.append(
            f"| {ex['id']} `{ex['name']}` | {ex.get('points', 0)} / {ex['max']} | "
            f"{_MARK.get(ex['status'], '')} {names.get(ex['status'], ex['status'])} |"
        )
    out.append("")
    for ex in row.exercises:
        out += [f"## {ex['id']} `{ex['name']}`: {ex.get('points', 0)} / {ex['max']}", ""]
        if ex.get("message"):
            out += [ex["message"], ""]
        if ex.get("hint"):
            out += [text["hint"].format(hint=ex["hint"]), ""]
    happened = [e for e in row.events if e["kind"] != "cell_error"]
    errors = [e for e in row.events if e["kind"] == "cell_error"]
    if happened:
        out += [text["happened"], ""]
        for e in happened:
            out += [e["text"], ""]
            if e.get("detail"):
                out += ["```", e["detail"], "```", ""]
    if errors:
        out += [text["cell_errors"], ""]
        for e in errors[:5]:
            out += [e["text"], "", "```", e.get("detail", ""), "```", ""]
        if len(errors) > 5:
            out += [text["more_errors"].format(count=len(errors) - 5), ""]
    if row.run_seconds is not None and row.score_seconds is not None:
        times = text["times"].format(run=row.run_seconds, checks=row.score_seconds)
        out += ["---", times, ""]
    return "\n".join(out)
