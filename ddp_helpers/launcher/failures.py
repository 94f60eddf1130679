"""What went wrong in a run: each rank's failure as a record, which rank caused it (blame),
and the error the notebook shows. Pure functions over records: no processes here."""

from __future__ import annotations

import pickle
import re
from dataclasses import dataclass

from .. import i18n
from ..i18n import messages
from ..procs import signal_name
from ..torch_compat import C10D_FRAME, PEER_GONE
from .protocol import RankError, StartFailed

# Learner-facing text of this module, in one place so that it can be translated.
MESSAGES = messages(
    "launcher.failures",
    {
        "exception": "rank {rank} raised {type}: {message}",
        "sys_exit": "rank {rank} called sys.exit({code})",
        "exit_code": (
            "rank {rank} exited with code {code} before returning a result (os._exit, or a "
            "crash inside C/C++ code)"
        ),
        "exit_zero": (
            "rank {rank} exited (code 0) without returning a result: did it call os._exit(0)?"
        ),
        "killed": "rank {rank} was killed by {signame} (signal {signum})",
        "not_finished": "rank {rank} did not finish",
        "stopped": "rank {rank} was stopped by the launcher",
        "killed_hint_kill": (
            "SIGKILL from outside usually means the machine ran out of memory (the kernel's "
            "OOM killer): try fewer ranks or a smaller model."
        ),
        "others_stopped": "The other ranks were stopped.",
        "also_failed": "rank {rank} also failed: {summary}",
        "more_failed": "{count} other rank(s) failed after it (err.failures has each).",
        "traceback_of": "Traceback of rank {rank} (most recent call last):",
        "stack_at_death": "Python stack of rank {rank} when it died (most recent call last):",
        "timeout": "The run did not finish within {timeout:g} s, so every rank was stopped.",
        "timeout_where": "Where each rank was at that moment (most recent call last):",
        "interrupted_where": (
            "Interrupted: every rank was stopped. Where each was (most recent call last):"
        ),
        "timeout_hint": (
            "A rank waiting in a collective (barrier, all_reduce, broadcast, DDP's backward) "
            "that another rank never reaches hangs forever: look for a collective inside "
            "`if rank == 0:`, or a rank that returned early. Raise `timeout=` if the work is "
            "just slow."
        ),
        "waiting_in": "rank {rank} was at {where}",
        "rank_finished": "rank {rank}: had already finished",
        "returned_while_waiting": (
            "{ranks} returned while rank {rank} waited in {collective}: a collective only "
            "some ranks make, like one inside `if rank == 0:`"
        ),
        "a_collective": "a collective",
        "peer_returned": (
            "{ranks} had already returned when this happened. A collective (barrier, all_reduce, "
            "broadcast, DDP's backward) that not every rank calls, for example one inside "
            "`if rank == 0:`, fails like this or hangs."
        ),
        "no_stack": "rank {rank}: gave no stack (it did not answer the dump signal)",
        "cannot_start": (
            "Rank {rank} of {nprocs} could not be started: the system refused to create another "
            "process ({error}). {limit}Each rank is a process: launch fewer ranks, or end other "
            "processes of yours, then run the cell again. The ranks already started were stopped."
        ),
        "nproc_limit": (
            "This user may run at most {limit} processes and threads at once (RLIMIT_NPROC, "
            "`ulimit -u`), counting every process of theirs on the machine. "
        ),
        "launcher_died": (
            "The launcher's helper process died unexpectedly, so the ranks were stopped. Run the "
            "cell again; if it keeps happening, restart the kernel."
        ),
        "launcher_confused": (
            "The launcher and its helper process did not understand each other ({error}), so the "
            "ranks and the helper were stopped. Run the cell again; if it keeps happening, restart "
            "the kernel (was ddp_helpers upgraded while it ran?)."
        ),
        "one_rank": "rank {ranks}",
        "many_ranks": "ranks {ranks}",
        "stack_of": "rank {rank}:",
        # Frames inside torch, one line (tracebacks.py): the functions, then the last's place.
        "in_torch": "in torch: {calls} ({file}, line {line})",
        "quirk_signal": "was killed by {signal}",
        "quirk_code": "exited with code {code}",
        "exit_quirk": (
            "[ddp_helpers] warning: rank {rank} {how} at exit, after it had returned its "
            "result; the result is kept. (gloo and DDP sometimes abort at interpreter exit.)"
        ),
        "exit_unguarded": (
            "[ddp_helpers] note: rank {rank} {how} at exit, after it had returned its result "
            "(the result is kept). This happened in the rank's own interpreter exit, not in "
            "the launcher: with guards off, a rank ends as under torchrun, running its atexit "
            'handlers and destructors, and gloo can abort there ("terminate called without '
            'an active exception"), most often when a process group was never destroyed '
            "(lesson 04). Under torchrun or torch.multiprocessing.spawn this exit fails the job."
        ),
        "hung_at_exit": (
            "rank {rank}: had returned its result, then hung at exit (guards off: in its "
            "interpreter's own exit, which runs atexit handlers and destructors)"
        ),
    },
)


@dataclass(frozen=True)
class RankFailure:
    """How one rank failed: an exception, an exit, a signal, or where it was at a timeout."""

    rank: int
    kind: str  # "exception", "exit", "signal" or "timeout"
    exc_type: str | None = None
    message: str | None = None
    traceback: str | None = None  # the rank's traceback, cells named as in the notebook
    exitcode: int | None = None  # negative: killed by that signal
    stack: str | None = None  # its Python stack: where it crashed, or waited at a timeout
    at: float | None = None  # when it failed (CLOCK_MONOTONIC, in every process alike)
    stopped: bool = False  # the launcher stopped it after another rank had failed
    finished: bool = False  # at a timeout: it had already returned its result (and exited)
    returned: bool = False  # at a timeout: it had returned its result, but not exited

    @property
    def signal(self) -> str | None:
        """'SIGKILL' when the rank was killed by a signal, else None."""
        return (
            signal_name(-self.exitcode) if self.exitcode is not None and self.exitcode < 0 else None
        )

    @property
    def by_peer(self) -> bool:
        """It failed because a peer went away: a victim of another rank's failure."""
        return self.kind == "exception" and PEER_GONE in (self.message or "")

    def summary(self) -> str:
        """One line: 'rank 1 raised ValueError: ...', 'rank 0 was killed by SIGKILL ...'."""
        if self.kind == "exception":
            if self.exc_type == "SystemExit":
                return MESSAGES["sys_exit"].format(rank=self.rank, code=self.message)
            return MESSAGES["exception"].format(
                rank=self.rank, type=self.exc_type, message=self.message
            )
        code = self.exitcode
        if code is None:
            return MESSAGES["not_finished"].format(rank=self.rank)
        if code < 0:
            return MESSAGES["killed"].format(rank=self.rank, signame=self.signal, signum=-code)
        if code == 0:
            return MESSAGES["exit_zero"].format(rank=self.rank)
        return MESSAGES["exit_code"].format(rank=self.rank, code=code)


def mismatch(first: RankFailure | None, returned: list[int]) -> str | None:
    """Whether the ranks called different collectives, as the failure shows it: "abort" (the
    rank to blame aborted inside a collective: gloo's answer to calls that do not match),
    "returned" (it failed because a peer went away, and a rank had already returned: that
    rank skipped a collective the others made), or None. The one verdict behind the
    launcher's report and the checks' "mismatch"."""
    if first is None:
        return None
    if first.signal == "SIGABRT" and C10D_FRAME in (first.stack or ""):
        return "abort"
    if returned and first.by_peer:
        return "returned"
    return None


def blame(failures: list[RankFailure], peer_text: bool = True) -> list[RankFailure]:
    """The failures, the rank that caused them first, its victims after it.

    A rank the launcher stopped is a victim; so is a rank whose peer went away ("Connection
    reset/closed by peer", when torch's error text is known: `peer_text`). Among the rest,
    the earliest failure comes first.
    """

    def key(f: RankFailure) -> tuple:
        victim = f.stopped or (peer_text and f.by_peer)
        return (victim, f.at if f.at is not None else float("inf"), f.rank)

    return sorted(failures, key=key)


def failure_report(
    failures: list[RankFailure], nprocs: int, returned: list[int], peer_text: bool = True
) -> tuple[str, str, RankFailure]:
    """(one paragraph, the full report, the rank to blame) for ranks that failed."""
    ordered = blame(failures, peer_text)
    first = ordered[0]
    victims_with_errors = [f for f in ordered[1:] if not f.stopped or f.kind == "exception"]
    one_sided = ""
    if mismatch(first, returned) == "returned":
        one_sided = _sentence(
            i18n.tightened(
                MESSAGES["returned_while_waiting"].format(
                    ranks=_ranks(returned), rank=first.rank, collective=_collective_of(first)
                )
            )
        )
    paragraph = i18n.sentences(
        one_sided,
        _sentence(first.summary().split("\n\n")[0].strip()),
        MESSAGES["more_failed"].format(count=len(victims_with_errors))
        if victims_with_errors
        else "",
        MESSAGES["others_stopped"] if nprocs > 1 else "",
    )
    parts = [first.summary()]
    if first.traceback:
        parts.append(
            first.traceback.rstrip().replace(
                "Traceback (most recent call last):",
                MESSAGES["traceback_of"].format(rank=first.rank),
                1,
            )
        )
    if first.stack:
        parts.append(MESSAGES["stack_at_death"].format(rank=first.rank) + "\n" + first.stack)
    if first.signal == "SIGKILL":
        parts.append(MESSAGES["killed_hint_kill"])
    if one_sided:
        parts.append(MESSAGES["peer_returned"].format(ranks=_ranks(returned)))
    tail = [
        MESSAGES["also_failed"].format(rank=f.rank, summary=f.summary())
        for f in victims_with_errors
    ]
    if nprocs > 1:
        tail.append(MESSAGES["others_stopped"])
    if tail:
        parts.append("\n".join(tail))
    return paragraph, "\n\n".join(parts), first


def timeout_report(timeout: float, stacks: list[RankFailure]) -> tuple[str, str]:
    """(one paragraph, the full report) for a run stopped at its timeout."""
    parts = [i18n.sentences(MESSAGES["timeout"].format(timeout=timeout), MESSAGES["timeout_where"])]
    for f in stacks:
        if f.finished:
            parts.append(MESSAGES["rank_finished"].format(rank=f.rank))
        elif f.returned:
            parts.append(
                "\n".join(filter(None, [MESSAGES["hung_at_exit"].format(rank=f.rank), f.stack]))
            )
        elif f.stack:
            parts.append(MESSAGES["stack_of"].format(rank=f.rank) + "\n" + f.stack)
        else:
            parts.append(MESSAGES["no_stack"].format(rank=f.rank))
    parts.append(MESSAGES["timeout_hint"])
    waiting = [
        MESSAGES["waiting_in"].format(rank=f.rank, where=_innermost_own_line(f.stack))
        for f in stacks
        if f.stack
    ]
    paragraph = MESSAGES["timeout"].format(timeout=timeout)
    if waiting:
        paragraph = i18n.sentences(paragraph, i18n.clauses(waiting))
    return paragraph, "\n\n".join(parts)


def _ranks(ranks: list[int]) -> str:
    """'rank 1', 'ranks 1 and 2', in the messages' language."""
    key = "one_rank" if len(ranks) == 1 else "many_ranks"
    return MESSAGES[key].format(ranks=i18n.and_listed(ranks))


# A frame of torch's collectives' module in a traceback: '  File ".../distributed_c10d.py",
# line 2870, in all_reduce'.
_C10D_CALL = re.compile(r'^  File "[^"]*distributed_c10d\.py", line \d+, in (?P<name>\w+)$')


def _collective_of(failure: RankFailure) -> str:
    """The collective a rank waited in when its peer went away ("all_reduce"), from the
    outermost frame of torch's collectives' module in its traceback."""
    for line in (failure.traceback or "").splitlines():
        match = _C10D_CALL.match(line)
        if match and not match["name"].startswith("_"):
            return f"`{match['name']}`"
    return MESSAGES["a_collective"]


def _sentence(text: str) -> str:
    """text ended as a sentence: with a full stop of its language unless it has one."""
    if text.endswith((".", "!", "?", ")", "。", "！", "？", "）")):
        return text
    return text + i18n.JOINS["stop"]


def _innermost_own_line(stack: str) -> str:
    """The last frame of a stack that is the notebook's (a cell) or else the last frame."""
    frames = [
        line.strip().removeprefix("File ")
        for line in stack.splitlines()
        if line.startswith("  ") and not line.startswith("    ") and " in " in line
    ]
    cells = [f for f in frames if f.startswith("Cell In[")]
    return (cells or frames or ["?"])[-1]


class DistributedError(RuntimeError):
    """A rank failed, died, or the run timed out; says which rank and why.

    `str(err)` is one paragraph; `err.render()` (what IPython shows) adds each rank's
    traceback or stack; `err.failures[rank]` holds every failed rank's record.
    """

    def __init__(
        self,
        message: str,
        *,
        kind: str,
        failures: dict[int, RankFailure] | None = None,
        rank: int | None = None,
        report: str | None = None,
        returned_ranks: list[int] | None = None,
        original: BaseException | None = None,
    ):
        super().__init__(message)
        # "exception", "exit", "signal", "timeout", "launcher" or "start" (a rank that
        # could not be started: `rank` says which)
        self.kind = kind
        self.failures = dict(failures or {})
        self.rank = rank
        self.report = report or message
        # Ranks that had returned when the failure happened: with a peer's "connection
        # reset", the sign of a collective that only some ranks called.
        self.returned_ranks = list(returned_ranks or [])
        self.original = original  # the rank's own exception object, when it could be sent

    def render(self) -> str:
        """The full report: each failed rank's traceback, or where each rank waited."""
        return self.report

    def _render_traceback_(self) -> list[str]:
        """What IPython shows for this error: the report, not the launcher's own frames."""
        return [f"DistributedError: {self.args[0]}", "", *self.render().splitlines()]

    def __reduce__(self):
        return (
            _rebuild,
            (
                type(self),
                self.args[0],
                self.kind,
                self.failures,
                self.rank,
                self.report,
                self.returned_ranks,
                _picklable(self.original),
            ),
        )

    def _blamed(self) -> RankFailure | None:
        return self.failures.get(self.rank) if self.rank is not None else None

    @property
    def exc_type(self) -> str | None:
        f = self._blamed()
        return f.exc_type if f else None

    @property
    def exc_message(self) -> str | None:
        f = self._blamed()
        return f.message if f else None

    @property
    def traceback(self) -> str | None:
        f = self._blamed()
        return f.traceback if f else None

    @property
    def exitcode(self) -> int | None:
        f = self._blamed()
        return f.exitcode if f else None

    @property
    def signal_name(self) -> str | None:
        f = self._blamed()
        return f.signal if f else None

    @property
    def stacks(self) -> dict[int, str]:
        """At a timeout: where each rank was, by rank."""
        return {r: f.stack for r, f in self.failures.items() if f.kind == "timeout" and f.stack}

    @property
    def mismatch(self) -> str | None:
        """ "abort" or "returned" when the ranks called different collectives (`mismatch()`)."""
        return mismatch(self._blamed(), self.returned_ranks)


def nproc_limit_text(limit: int | None) -> str:
    """The sentence naming the user's process limit (RLIMIT_NPROC), or "" when there is none."""
    return MESSAGES["nproc_limit"].format(limit=limit) if limit is not None else ""


def start_failure_error(
    rank: int, nprocs: int, error: str, nproc_limit: int | None
) -> DistributedError:
    """The error for a rank that could not be started (its fork failed): which, and why."""
    limit = nproc_limit_text(nproc_limit)
    paragraph = MESSAGES["cannot_start"].format(rank=rank, nprocs=nprocs, error=error, limit=limit)
    return DistributedError(paragraph, kind="start", rank=rank)


def _picklable(exc):
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return None
    return exc


def _rebuild(cls, message, kind, failures, rank, report, returned, original):
    return cls(
        message,
        kind=kind,
        failures=failures,
        rank=rank,
        report=report,
        returned_ranks=returned,
        original=original,
    )


@dataclass
class RankRecord:
    """What the run loop saw of one rank (run.py fills it in; nothing here is worded)."""

    rank: int
    exitcode: int | None = None  # None: it never exited (or its exit was never reported)
    exited_at: float | None = None
    result: bytes | None = None  # the pickled return value, once it has sent one
    error: RankError | None = None  # what the rank sent about its exception (rank.py)
    stack: str = ""  # faulthandler's dump: at a crash, or at the timeout's request
    stopped: bool = False  # it exited after the launcher had told it to stop

    @property
    def has_result(self) -> bool:
        return self.result is not None


def failure_of(record: RankRecord, relabel, render_stack) -> RankFailure | None:
    """The rank's failure, or None if it returned a result (a crash at exit is no failure).

    `relabel` names notebook cells in a traceback, `render_stack` turns faulthandler's dump
    into a readable stack: both from tracebacks.py, passed in to keep this pure.
    """
    if record.error is not None:
        err = record.error
        return RankFailure(
            rank=record.rank,
            kind="exception",
            exc_type=err.type,
            message=err.message,
            traceback=relabel(err.traceback),
            exitcode=record.exitcode,
            at=err.time,
            stopped=False,
        )
    if record.has_result:
        return None
    code = record.exitcode
    return RankFailure(
        rank=record.rank,
        kind="signal" if code is not None and code < 0 else "exit",
        exitcode=code,
        stack=render_stack(record.stack) if record.stack else None,
        at=record.exited_at,
        stopped=record.stopped,
    )


@dataclass(frozen=True)
class RunEnd:
    """How a run ended, as the run loop saw it (run.py's Run.end): what run_error judges."""

    nprocs: int
    records: list[RankRecord]
    timeout: float | None = None
    timed_out: bool = False
    start_failure: StartFailed | None = None  # a rank the zygote could not fork
    launcher_died: bool = False
    protocol_error: str | None = None  # a message that could not be read
    guards: bool = True  # the launch's guards (plan.Options.guards): off, ranks exit as scripts


def run_error(end: RunEnd, relabel, render_stack, peer_text: bool = True, originals: bool = True):
    """The DistributedError a run that ended so raises; None when every rank returned.

    `relabel` and `render_stack` as for failure_of; `peer_text`: torch's error text is known
    (touchpoint "peer_text"); `originals`: the rank's exception object is loaded (never for
    ranks that are not trusted: loading a pickle runs what it names). An error of kind
    "launcher" means the zygote is not to be trusted any more.
    """
    if end.start_failure is not None:
        f = end.start_failure
        return start_failure_error(f.rank, end.nprocs, f.error, f.nproc_limit)
    if end.protocol_error is not None:
        message = MESSAGES["launcher_confused"].format(error=end.protocol_error)
        return DistributedError(message, kind="launcher")
    if end.launcher_died:
        return DistributedError(MESSAGES["launcher_died"], kind="launcher")
    if end.timed_out:
        return _timeout_error(end, render_stack)
    failures = [f for r in end.records if (f := failure_of(r, relabel, render_stack))]
    if not failures:
        return None
    returned = [r.rank for r in end.records if r.has_result]
    paragraph, report, first = failure_report(failures, end.nprocs, returned, peer_text)
    return DistributedError(
        paragraph,
        kind=first.kind,
        failures={f.rank: f for f in failures},
        rank=first.rank,
        report=report,
        returned_ranks=returned,
        original=_exception_of(end.records[first.rank].error) if originals else None,
    )


def _timeout_error(end: RunEnd, render_stack) -> DistributedError:
    stacks = [
        RankFailure(
            rank=r.rank,
            kind="timeout",
            stack=render_stack(r.stack) or None,
            finished=r.has_result and not r.stack,
            returned=not end.guards and r.has_result and bool(r.stack),
        )
        for r in end.records
    ]
    paragraph, report = timeout_report(end.timeout, stacks)
    failures = {f.rank: f for f in stacks if not f.finished}
    return DistributedError(paragraph, kind="timeout", failures=failures, report=report)


def _exception_of(error: RankError | None) -> BaseException | None:
    if error is None or error.exception is None:
        return None
    try:
        return pickle.loads(error.exception)
    except Exception:
        return None


def interrupt_report(records: list[RankRecord], render_stack) -> str | None:
    """Where each rank was when stop was pressed; None if no rank gave its stack."""
    parts = [
        MESSAGES["stack_of"].format(rank=r.rank) + "\n" + render_stack(r.stack)
        for r in records
        if r.stack
    ]
    return "\n\n".join([MESSAGES["interrupted_where"], *parts]) if parts else None


def exit_quirks(records: list[RankRecord], guards: bool = True) -> list[str]:
    """A warning for each rank that returned its result, then crashed or failed at exit;
    without `guards`, a note that says it was the rank's own interpreter exit."""
    key = "exit_quirk" if guards else "exit_unguarded"
    warnings = []
    for record in records:
        if record.has_result and record.exitcode:
            code = record.exitcode
            how = (
                MESSAGES["quirk_signal"].format(signal=signal_name(-code))
                if code < 0
                else MESSAGES["quirk_code"].format(code=code)
            )
            warnings.append(MESSAGES[key].format(rank=record.rank, how=how))
    return warnings
