"""The rank runner: how a check runs an answer, on N ranks (run_on_ranks) or on one
(run_answer, answers_to), each value back as plain data, and the harnesses for one rank
(call, each_case)."""

from __future__ import annotations

import contextlib
import contextvars

from .. import i18n
from ..launcher import DistributedError
from ..launcher.api import launch_plain
from ..launcher.plain import to_plain
from .answer_errors import AnswerRaised
from .model import GRADING, HANG_TIMEOUT, Wrong
from .texts import Phrase
from .tripwire import FROM_COURSE_EXIT, in_rank

# The tests' seam (hang_limit): a hang named sooner than the check's own timeout says.
_HANG_LIMIT: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "hang_limit", default=None
)


@contextlib.contextmanager
def hang_limit(seconds: float):
    """Every run_on_ranks launched inside waits at most `seconds` before it names a hang,
    whichever module's check runs it: how a test that expects a hang costs less."""
    token = _HANG_LIMIT.set(seconds)
    try:
        yield
    finally:
        _HANG_LIMIT.reset(token)


def _launched(harness, answer, args, nprocs: int, nnodes: int, timeout: float):
    """harness(answer, *args) on N CPU ranks, each value back as plain data (launch_plain:
    the answer is the learner's code, and nothing it does runs code in this process). When
    grading, an answer found to be the course's reference is Wrong("from_course")."""

    grading = GRADING.get()
    references = grading.reference_names() if grading is not None else []
    call = (in_rank, references, harness, answer, *args)
    try:
        return launch_plain(*call, nprocs=nprocs, nnodes=nnodes, timeout=timeout)
    except DistributedError as exc:
        if grading is not None and any(
            f.exitcode == FROM_COURSE_EXIT for f in exc.failures.values()
        ):
            raise Wrong("from_course", name=grading.name) from None
        raise


def run_on_ranks(
    harness, answer, *args, nprocs: int = 2, nnodes: int = 1, timeout: float = HANG_TIMEOUT
):
    """Run a checker's harness, harness(answer, *args), on N CPU ranks; each rank's value
    comes back as plain data. A hang, or collectives that do not match, becomes the Wrong
    that names it ("hang", "mismatch")."""
    limit = _HANG_LIMIT.get()
    timeout = timeout if limit is None else min(timeout, limit)
    try:
        return _launched(harness, answer, args, nprocs, nnodes, timeout)
    except DistributedError as exc:
        if exc.kind == "timeout":
            raise Wrong("hang", timeout=timeout) from None
        if exc.mismatch == "abort":
            raise Wrong("mismatch", what=Phrase("mismatch_abort", signal=exc.signal_name)) from None
        if exc.mismatch == "returned":
            returned = i18n.listed(exc.returned_ranks)
            what = Phrase("mismatch_returned", returned=returned, rank=exc.rank)
            raise Wrong("mismatch", what=what) from None
        raise


def run_answer(harness, answer, *args, timeout: float = HANG_TIMEOUT):
    """harness(answer, *args) on one rank, its value back as plain data: how a check runs
    an answer it could call itself, so that the learner's code never runs in the process
    that judges it. What the answer raised comes back as AnswerRaised; an answer that does
    not return within `timeout` is Wrong("endless")."""
    try:
        return _launched(harness, answer, args, 1, 1, timeout)[0]
    except DistributedError as exc:
        if exc.kind == "timeout":
            raise Wrong("endless", timeout=timeout) from None
        if exc.kind == "exception":
            raise AnswerRaised(exc.exc_type, exc.exc_message, exc.traceback) from None
        raise


def call(fn, *args):
    """A harness for run_answer: what fn(*args) returns, as plain data (to_plain)."""

    return to_plain(fn(*args))


def each_case(fn, cases) -> tuple[list, int | None]:
    """A harness for run_answer: fn(*args) for each args of `cases` in turn, as plain data,
    up to the first that raises; (what each returned, the index of the one that raised or
    None). The check runs that one again alone (run_answer(call, ...)) to show what it
    raised, after judging those before it, as it would have calling them one by one."""

    out = []
    for args in cases:
        try:
            out.append(to_plain(fn(*args)))
        except Exception:  # noqa: BLE001 - shown when the check comes to this case
            return out, len(out)
    return out, None


def answers_to(fn, cases):
    """What fn returns for each args of `cases`, in order, run on one rank (each_case); the
    first case it raises on raises AnswerRaised here, when the iteration comes to it."""
    cases = [tuple(args) for args in cases]
    out, raised = run_answer(each_case, fn, cases)
    yield from out
    if raised is not None:
        yield run_answer(call, fn, *cases[raised])  # raises again, as the answer does
        yield from answers_to(fn, cases[raised + 1 :])
