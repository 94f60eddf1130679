"""A batch of submissions: graded N at a time, a timeout among others graded again alone,
each row handed to the outputs (outputs.py) as it is settled, and Ctrl-C that stops
everything cleanly."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import re
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ... import i18n
from ...files import remove_tree
from ...i18n import messages
from ..budget import TICKS, TimeBudget
from ..confinement.sandbox import Confinement, ConfinementRequest
from ..defaults import DEFAULT_OUT, DEFAULT_VISIBILITY
from ..outputs.reports import columns_for, feedback_names, in_order, summary
from ..outputs.writers import ClassReport, FeedbackFiles, GradescopeResults, GradesCsv, Output
from ..results import Event, Row, Status, Submission
from . import dispatch
from .overwrites import refuse_overwrites
from .progress import Progress
from .submissions import find_submissions

# What the learner's feedback says about a second try: in the submission's language.
RETRY_MESSAGES = messages(
    "grading.batch",
    {
        "retried": (
            "The first try was stopped at its time limit ({first:.1f} s in all) while "
            "{others} other submissions shared the machine, so it was graded again alone; "
            "this is the result of that second try."
        ),
        "retried_one": (
            "The first try was stopped at its time limit ({first:.1f} s in all) while 1 other "
            "submission shared the machine, so it was graded again alone; this is the result "
            "of that second try."
        ),
        "not_retried": (
            "This notebook ran past the limit while other submissions shared the machine; the "
            "batch was interrupted before it could be graded again alone."
        ),
    },
)

INSTRUCTOR_TEXT = {
    "start": "Grading {count} submission{s}, {jobs} at a time; each notebook may run {limit:g} s",
    "wrote": "grades: {out}{feedback}",
    "retrying": (
        "{count} submission{s} ran past the limit while others were being graded; "
        "grading {them} again, one at a time, so that a busy machine cannot cost points"
    ),
    "output_failed": "warning: {name} could not be written everywhere: {error}",
    "left": (
        "warning: {folder}, the batch's temporary folder, could not be removed whole "
        "(something in it is not this user's to remove): remove it by hand."
    ),
    "interrupted": (
        "Interrupted: {done} of {total} graded; {out} holds those rows. Everything the "
        "unfinished submissions started was stopped."
    ),
}


@dataclasses.dataclass(frozen=True)
class GradeOptions:
    """How a batch is graded and what it writes: `python -m ddp_helpers grade`'s options."""

    out: str | Path = DEFAULT_OUT  # the CSV
    feedback: str | Path | None = None  # a folder: one Markdown file per submission
    budget: TimeBudget = TimeBudget()  # the time each submission may take (budget.py)
    jobs: int = 1  # submissions graded at once
    lesson: str | None = None  # the lesson asked for: notebooks of others are invalid
    confinement: Confinement | None = None  # the sandbox and the limits (sandbox.choose)
    gradescope: str | Path | None = None  # a folder for Gradescope's results.json
    hidden_visibility: str = DEFAULT_VISIBILITY  # when Gradescope shows the extra cases
    student_from: re.Pattern | None = None  # finds the student in each submission's path
    report: str | Path | None = None  # the class report, an HTML file
    # What run_batch asks sandbox.choose for, when `confinement` is not given already:
    request: ConfinementRequest = ConfinementRequest()


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
            with i18n.using(row.submission.language):
                key = "retried_one" if others == 1 else "retried"
                note = RETRY_MESSAGES[key].format(first=first.seconds, others=others)
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
            with i18n.using(row.submission.language):
                note = RETRY_MESSAGES["not_retried"]
            self.on_row(dataclasses.replace(row, events=[Event("retried", note), *row.events]))
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
    options: GradeOptions | None = None,
    *,
    stream=None,
    grade_one: Callable[..., Row] | None = None,
) -> list[Row]:
    """Grade every submission in paths as `options` say; write its outputs; return the rows.

    The rows come back in submission order. A submission that runs past the limit while
    others are graded beside it (jobs > 1) is graded again alone once the rest are done.
    Progress and the summary go to `stream` (stderr). `grade_one(sub, budget, cancel,
    tmp_root) -> Row` grades one submission: by default dispatch.grade_one, a worker
    process confined as options.confinement says. GradingError, before anything is graded
    or written, where an output would be written onto a submission (overwrites.py).
    """
    options = options or GradeOptions()
    if grade_one is None:
        grade_one = functools.partial(dispatch.grade_one, confinement=options.confinement)
    subs = find_submissions(paths, options.lesson, options.student_from)
    refuse_overwrites(subs, options)  # before any output is made
    progress = Progress(len(subs), sys.stderr if stream is None else stream)
    outputs = outputs_for(subs, options, progress.say)
    handlers = _interrupt_handlers()  # put back at the end: Ctrl-C ignores them meanwhile
    # Every worker's folder is made in this one, which goes at the end whatever happens.
    tmp_root = tempfile.mkdtemp(prefix="ddp-grade-batch-", dir=_short_tmp(options.confinement))
    run = _Run(subs, options, outputs, progress, grade_one, tmp_root)
    try:
        run.grade_all()
    except KeyboardInterrupt:
        _ignore_interrupts()  # also when Ctrl-C came between the two phases
        run.interrupted()
        raise
    finally:
        # Whatever a notebook made in its folder (a tree past PATH_MAX, a folder chmod 000)
        # goes, and its removal never stops the batch's end.
        if not remove_tree(tmp_root):
            progress.say(INSTRUCTOR_TEXT["left"].format(folder=tmp_root))
        _restore_handlers(handlers)
    return run.finish()


def outputs_for(subs: list[Submission], options: GradeOptions, warn) -> list[Output]:
    """What the batch writes, the CSV first; folders are made now. warn(text): a warning."""
    names = feedback_names(subs)
    outputs: list[Output] = [GradesCsv(options.out, columns_for(subs))]
    if options.feedback is not None:
        outputs.append(FeedbackFiles(options.feedback, names, options.budget.notebook, warn))
    if options.gradescope is not None:
        visibility = options.hidden_visibility
        outputs.append(GradescopeResults(options.gradescope, names, visibility, warn))
    if options.report is not None:
        outputs.append(ClassReport(options.report, options.budget.notebook))
    return outputs


class _Run:
    """One run of grade(): threads grade the submissions N at a time with grade_one, each
    final row goes to the outputs and the progress, and the batch ends, done or interrupted.

    The threads take submissions from the Batch and settle their rows under one lock, until
    none is left or `cancel` is set. An exception while settling (the CSV cannot be
    written) cancels the rest and is raised by finish().
    """

    def __init__(self, subs, options: GradeOptions, outputs, progress, grade_one, tmp_root):
        self.subs, self.options, self.outputs, self.progress = subs, options, outputs, progress
        self.grade_one, self.tmp_root = grade_one, tmp_root
        self.rows: list[Row] = []
        self.batch = Batch(subs, self.finished)
        self.cancel = threading.Event()
        self.lock = threading.Condition()
        self.fatal: list[BaseException] = []
        self.started = time.monotonic()

    def finished(self, row: Row) -> None:
        """A final row: written by every output, shown by the progress, kept as Row.kept.
        An OSError from the CSV (disk full) ends the batch; a row that breaks an output
        otherwise is named in a warning, and the batch goes on."""
        for output in self.outputs:
            try:
                output.row_done(row)
            except OSError:
                raise
            except Exception as exc:  # noqa: BLE001 - one row, never the batch
                name = row.submission.name
                self.progress.say(INSTRUCTOR_TEXT["output_failed"].format(name=name, error=exc))
        self.rows.append(row.kept())
        self.progress.finished(row)

    def grade_all(self) -> None:
        """The invalid rows, every other submission N at a time, then the held timeouts alone."""
        count, options = len(self.subs), self.options
        self.progress.say(
            INSTRUCTOR_TEXT["start"].format(
                count=count,
                s="" if count == 1 else "s",
                jobs=options.jobs,
                limit=options.budget.notebook,
            )
        )
        for sub in self.subs:  # invalid ones need no kernel: their rows come first
            if sub.problem is not None:
                self.finished(Row.invalid(sub))
        self._run_threads(max(1, options.jobs))
        if self.batch.held and not self.cancel.is_set():
            again = self.batch.retry_alone()
            self.progress.say(
                INSTRUCTOR_TEXT["retrying"].format(
                    count=again, s="" if again == 1 else "s", them="it" if again == 1 else "them"
                )
            )
            self._run_threads(1)

    def interrupted(self) -> None:
        """After Ctrl-C: the first tries of held timeouts kept, the outputs finished."""
        self.cancel.set()
        self.batch.give_up_retries()
        self._outputs_done()  # what was graded, reported
        self.progress.done()
        total, out = len(self.subs), self.options.out
        self.progress.say(
            INSTRUCTOR_TEXT["interrupted"].format(done=len(self.rows), total=total, out=out)
        )

    def finish(self) -> list[Row]:
        """The outputs finished, the summary said; the rows in submission order."""
        wall = time.monotonic() - self.started
        wrote = self._outputs_done()
        self.progress.done()
        if self.fatal:
            raise self.fatal[0]
        for line in summary(self.rows, columns_for(self.subs), wall, self.options.jobs):
            self.progress.say(line)
        shown = "".join(f" · {w}" for w in wrote[1:])
        self.progress.say(INSTRUCTOR_TEXT["wrote"].format(out=wrote[0], feedback=shown))
        return in_order(self.rows, self.subs)

    def _outputs_done(self) -> list[str]:
        rows, wall = in_order(self.rows, self.subs), time.monotonic() - self.started
        return [output.batch_done(rows, wall) for output in self.outputs]

    def _run_threads(self, count: int) -> None:
        """`count` threads until they are done; on Ctrl-C (SIGTERM, SIGHUP), cancel, wait for
        them, then raise KeyboardInterrupt.

        Meanwhile an interrupt is only noted (_interrupts_noted), and looked at each tick:
        raised in the main thread, it could land inside threading.Condition's own Python
        code, just after the lock was taken (before `with` can let it go: the workers then
        wait for it forever, as a test run once did) or just after wait() let it go."""
        threads: list[threading.Thread] = []
        with _interrupts_noted() as noted:
            for _ in range(count):
                threads.append(threading.Thread(target=self._work, daemon=True))
                threads[-1].start()
            while not noted and any(t.is_alive() for t in threads):
                with self.lock:
                    self.lock.wait(timeout=TICKS.progress)
                    self.progress.tick()
            if noted:
                self.cancel.set()
                for t in threads:
                    t.join()
        if noted:
            raise KeyboardInterrupt

    def _work(self) -> None:
        batch = self.batch
        while not self.cancel.is_set():
            with self.lock:
                sub = batch.take()
                self.progress.running = len(batch.running)
            if sub is None:
                return
            row = self.grade_one(sub, self.options.budget, self.cancel, self.tmp_root)
            with self.lock:
                try:
                    if self.cancel.is_set():
                        batch.running.pop(sub.name, None)
                    else:
                        batch.settle(row)
                except BaseException as exc:  # noqa: BLE001 - reported by the main thread
                    self.fatal.append(exc)
                    self.cancel.set()
                self.progress.running = len(batch.running)
                self.lock.notify_all()


def _interrupt_handlers() -> dict:
    """The handlers of Ctrl-C, SIGTERM and SIGHUP now (none outside the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}


@contextlib.contextmanager
def _interrupts_noted():
    """Inside: Ctrl-C, SIGTERM and SIGHUP, where a Python handler would raise (Ctrl-C's own,
    run_batch's), are appended to the list yielded instead. After: the handlers put back,
    or ignored if one came (a second Ctrl-C must not cut grade()'s clean-up short; grade()
    puts them back at its end)."""
    noted: list[int] = []
    replaced = {sig: h for sig, h in _interrupt_handlers().items() if callable(h)}
    for sig in replaced:
        signal.signal(sig, lambda signum, frame: noted.append(signum))
    try:
        yield noted
    finally:
        for sig, handler in replaced.items():
            signal.signal(sig, signal.SIG_IGN if noted else handler)


def _ignore_interrupts() -> None:
    for sig in _interrupt_handlers():
        signal.signal(sig, signal.SIG_IGN)


def _restore_handlers(handlers: dict) -> None:
    for sig, handler in handlers.items():
        if handler is not None:  # None: set outside Python, cannot be put back
            signal.signal(sig, handler)
