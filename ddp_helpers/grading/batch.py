"""A batch of submissions: graded N at a time, a timeout among others graded again alone,
rows written as they finish, and Ctrl-C that stops everything cleanly."""

from __future__ import annotations

import dataclasses
import functools
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from .class_report import write_report
from .gradescope import results_paths, write_results
from .reports import (
    MESSAGES as REPORT_MESSAGES,
)
from .reports import (
    CsvWriter,
    Progress,
    feedback_names,
    in_order,
    summary,
    write_feedback,
)
from .results import Event, Row, Status, Submission
from .submissions import columns_for, find_submissions
from .worker import grade_one

DEFAULT_TIMEOUT = 300.0

MESSAGES = {
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
    "interrupted": (
        "Interrupted: {done} of {total} graded; {out} holds those rows. Everything the "
        "unfinished submissions started was stopped."
    ),
}


class Batch:
    """The scheduling of a batch: who is graded next, how crowded each run was, and which
    timeouts need a second try alone (a correct but slow notebook must not lose its points
    to someone else's endless loop). Threads call take() and settle(); the rest is theirs."""

    def __init__(self, subs: list[Submission], on_row: Callable[[Row], None]):
        self.on_row = on_row  # a final row: write it (CSV, feedback, progress)
        self.pending = [s for s in subs if s.problem is None]
        self.running: dict[str, int] = {}  # being graded -> most graded at once during its run
        self.held: dict[str, tuple[Row, int]] = {}  # timed out in a crowd: (row, crowd size)
        self.retried: set[str] = set()

    def take(self) -> Submission | None:
        """The next submission to grade (None: nothing left); it joins the running crowd."""
        if not self.pending:
            return None
        sub = self.pending.pop(0)
        self.running[sub.name] = 0
        for name in self.running:
            self.running[name] = max(self.running[name], len(self.running))
        return sub

    def settle(self, row: Row) -> Row | None:
        """A run's row: final (given to on_row and returned) or held back for a try alone."""
        name = row.submission.name
        crowd = self.running.pop(name)
        if row.status is Status.TIMEOUT and crowd > 1 and name not in self.retried:
            # Others shared the CPUs: a fair verdict needs a run on its own.
            self.held[name] = (row, crowd)
            return None
        if name in self.held:
            first, crowd = self.held.pop(name)
            others = crowd - 1
            note = MESSAGES["retried"].format(
                first=first.seconds, others=others, s="" if others == 1 else "s"
            )
            row = dataclasses.replace(
                row,
                events=[Event("retried", note), *row.events],
                seconds=row.seconds + first.seconds,
            )
        self.on_row(row)
        return row

    def retry_alone(self) -> int:
        """Queue the held timeouts for a second try; how many (run them with one worker)."""
        subs = [row.submission for row, _ in self.held.values()]
        self.retried.update(s.name for s in subs)
        self.pending[:] = subs
        return len(subs)

    def give_up_retries(self) -> None:
        """Interrupted before the second tries: the first tries' rows, with a note."""
        for row, _ in list(self.held.values()):
            self.on_row(
                dataclasses.replace(
                    row, events=[Event("retried", MESSAGES["not_retried"]), *row.events]
                )
            )
        self.held.clear()


def _short_tmp(confinement) -> str | None:
    """Where the batch's folder goes: TMPDIR, or /tmp in a sandbox if TMPDIR is long.

    A sandboxed kernel is reached over Unix sockets in its folder (the network is not
    shared), and their paths must fit in 107 bytes.
    """
    deepest = "/ddp-grade-batch-12345678/ddp-grade-12345678/kernel-ipc-shell"
    if confinement is not None and confinement.sandbox:
        if len((tempfile.gettempdir() + deepest).encode()) > 100:
            return "/tmp"
    return None


def grade(
    paths,
    out="grades.csv",
    feedback=None,
    timeout: float = DEFAULT_TIMEOUT,
    jobs: int = 1,
    lesson: str | None = None,
    stream=None,
    grade_submission=None,
    confinement=None,
    gradescope=None,
    hidden_visibility: str = "after_published",
    student_from=None,
    report=None,
) -> list[Row]:
    """Grade every submission in paths; write the CSV (and feedback); return the rows.

    Also, where asked: Gradescope's results.json per submission in `gradescope` (a folder;
    the grader's extra cases at `hidden_visibility`), the class report at `report` (an
    HTML file). `student_from`: a compiled pattern that finds the student in each path.

    The rows come back in submission order. A submission that runs past the limit while
    others are graded beside it (jobs > 1) is graded again alone once the rest are done.
    `grade_submission(sub, timeout, cancel, tmp_root) -> Row` defaults to a worker process,
    confined as `confinement` (sandbox.Confinement) says.
    """
    if grade_submission is None:
        grade_submission = functools.partial(grade_one, confinement=confinement)
    stream = sys.stderr if stream is None else stream
    subs = find_submissions(paths, lesson, student_from)
    columns = columns_for(subs)
    names = feedback_names(subs)
    gradescope_paths = results_paths(Path(gradescope), names) if gradescope is not None else {}
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if feedback is not None:
        Path(feedback).mkdir(parents=True, exist_ok=True)
    progress = Progress(len(subs), stream)
    count = len(subs)
    progress.say(
        REPORT_MESSAGES["start"].format(
            count=count, s="" if count == 1 else "s", jobs=jobs, limit=timeout
        )
    )
    started = time.monotonic()
    rows: list[Row] = []
    fatal: list[BaseException] = []
    cancel = threading.Event()
    lock = threading.Condition()
    handlers = _interrupt_handlers()  # put back at the end: Ctrl-C ignores them meanwhile
    # Every worker's folder is made in this one, which goes at the end whatever happens.
    tmp_root = tempfile.mkdtemp(prefix="ddp-grade-batch-", dir=_short_tmp(confinement))

    def finished(row: Row) -> None:
        rows.append(row)
        writer.write(row)  # an OSError here (disk full) ends the batch: see `fatal`
        try:
            if feedback is not None:
                write_feedback(row, Path(feedback) / names[row.submission.name], timeout)
            if gradescope is not None:
                path = gradescope_paths[row.submission.name]
                write_results(row, path, hidden_visibility)
        except OSError as exc:
            progress.say(
                REPORT_MESSAGES["feedback_failed"].format(name=row.submission.name, error=exc)
            )
        progress.finished(row)

    batch = Batch(subs, finished)

    def work():
        while not cancel.is_set():
            with lock:
                sub = batch.take()
                progress.running = len(batch.running)
            if sub is None:
                return
            row = grade_submission(sub, timeout, cancel, tmp_root)
            with lock:
                try:
                    if cancel.is_set():
                        batch.running.pop(sub.name, None)
                    else:
                        batch.settle(row)
                except BaseException as exc:  # noqa: BLE001 - reported by the main thread
                    fatal.append(exc)
                    cancel.set()
                progress.running = len(batch.running)
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
                    finished(Row.invalid(sub))
            try:
                run_workers(max(1, jobs))
                if batch.held and not cancel.is_set():
                    again = batch.retry_alone()
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
                batch.give_up_retries()
                writer.finish(rows, subs)
                if report is not None:  # what was graded, reported
                    write_report(in_order(rows, subs), report, timeout, time.monotonic() - started)
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
    wall = time.monotonic() - started
    if report is not None:
        write_report(in_order(rows, subs), report, timeout, wall)
    for line in summary(rows, columns, wall, jobs):
        progress.say(line)
    shown = f" · feedback: {feedback}/ ({len(rows)} files)" if feedback is not None else ""
    if gradescope is not None:
        shown += f" · Gradescope: {gradescope}/"
    if report is not None:
        shown += f" · class report: {report}"
    progress.say(REPORT_MESSAGES["wrote"].format(out=out, feedback=shown))
    return in_order(rows, subs)


def _interrupt_handlers() -> dict:
    """The handlers of Ctrl-C, SIGTERM and SIGHUP now (none outside the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}


def _ignore_interrupts() -> None:
    for sig in _interrupt_handlers():
        signal.signal(sig, signal.SIG_IGN)


def _restore_handlers(handlers: dict) -> None:
    for sig, handler in handlers.items():
        if handler is not None:  # None: set outside Python, cannot be put back
            signal.signal(sig, handler)
