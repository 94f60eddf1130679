"""The run loop: start the ranks, route their output, watch them, stop them. No wording here:
what it saw of each rank goes out as records (failures.py words and blames them)."""

from __future__ import annotations

import enum
import os
import selectors
import signal
import time

from . import wire
from .failures import RankRecord, RunEnd
from .output import STREAMS, OutputRouter
from .plan import STOP, StopPolicy
from .protocol import (
    Exited,
    LaunchRequest,
    ProtocolError,
    RankError,
    RankResult,
    Refused,
    Signal,
    Started,
    StartFailed,
    expect,
)


class Phase(enum.Enum):
    """Where a run is. It only moves along NEXT."""

    STARTING = "starting"  # the pipes are made, the request is not sent yet
    REQUESTED = "requested"  # the zygote is forking the ranks
    RUNNING = "running"  # the ranks exist (the zygote said Started)
    DUMPING = "dumping"  # every live rank was asked for its stack; they are killed next
    STOPPING = "stopping"  # SIGTERM sent; SIGKILL follows after StopPolicy.term_to_kill
    KILLED = "killed"  # SIGKILL sent: only their exits and output are awaited
    DONE = "done"  # every pipe closed: the run is over


NEXT = {
    Phase.STARTING: {Phase.REQUESTED, Phase.KILLED, Phase.DONE},
    Phase.REQUESTED: {Phase.RUNNING, Phase.KILLED, Phase.DONE},
    Phase.RUNNING: {Phase.DUMPING, Phase.STOPPING, Phase.KILLED, Phase.DONE},
    Phase.DUMPING: {Phase.KILLED, Phase.DONE},
    Phase.STOPPING: {Phase.KILLED, Phase.DONE},
    Phase.KILLED: {Phase.KILLED, Phase.DONE},  # a second stop press kills again
    Phase.DONE: set(),
}


class Reason(enum.IntEnum):
    """Why a run stops before every rank returned. When several come, the higher one is the
    reason: it is what the run's error reports (failures.run_error judges in this order)."""

    FAILURE = 1  # a rank raised or exited: the others are stopped after a grace
    TIMEOUT = 2  # the launch's timeout passed: stacks, then kill
    INTERRUPT = 3  # stop pressed: stacks (at most 1 s), then kill; a second press kills
    LAUNCHER_DIED = 4  # the zygote's socket closed
    PROTOCOL = 5  # a message that could not be read: kill
    START_FAILED = 6  # a rank could not be forked: the zygote stopped the others


class _Rank:
    """The loop's live view of one rank."""

    def __init__(self, rank: int):
        self.record = RankRecord(rank)
        self.status: int | None = None  # raw wait status, once exited
        self.ctl = wire.MessageReader()
        self.ctl_open = True
        self.stack = bytearray()

    def settled(self, now: float, drain: float) -> bool:
        # Judge a rank once it exited and its control pipe is drained (a child of the rank,
        # such as a DataLoader worker, may hold the pipe open: give it half a second).
        if self.status is None:
            return False
        return not self.ctl_open or now - self.record.exited_at > drain

    @property
    def failed(self) -> bool:
        return self.record.error is not None


class Run:
    """One launch, from fork to the last byte of output.

    Escalation (its timings: plan.StopPolicy): on a rank's failure the others get SIGTERM
    after a grace, SIGKILL a moment later; at the timeout every rank is asked for its stack
    (SIGUSR1, which faulthandler answers even inside C++), then killed; an interrupt
    (Ctrl-C) kills at once.
    """

    def __init__(
        self,
        zygote,
        req: LaunchRequest,
        timeout: float | None,
        router: OutputRouter,
        policy: StopPolicy = STOP,
        clock=time.monotonic,
    ):
        self.policy = policy
        self.clock = clock  # every time the run reads (tests inject their own)
        self.zygote = zygote
        self.req = req
        self.id = req.id
        self.nprocs = req.nprocs
        self.timeout = timeout
        self.router = router
        self.ranks = [_Rank(r) for r in range(self.nprocs)]
        self.fds: dict[int, tuple[int, str]] = {}
        self.sel = selectors.DefaultSelector()
        self.phase = Phase.STARTING
        self.reason: Reason | None = None  # None while no reason to stop has come
        # What the reason says more: a message the kernel, the zygote or a rank could not
        # read (PROTOCOL); the rank the zygote could not fork (START_FAILED).
        self.protocol_error: str | None = None
        self.start_failure: StartFailed | None = None
        # When things happened, or are due (self.clock()).
        self.deadline: float | None = None  # the timeout, counted from Started
        self.stop_at: float | None = None  # after a failure: when the others get SIGTERM
        self.stop_sent_at: float | None = None
        self.dump_sent_at: float | None = None

    def _to(self, phase: Phase) -> None:
        if phase not in NEXT[self.phase]:
            raise RuntimeError(f"launcher bug: run {self.id} went from {self.phase} to {phase}")
        self.phase = phase

    def _because(self, reason: Reason) -> None:
        if self.reason is None or reason > self.reason:
            self.reason = reason

    @property
    def done(self) -> bool:
        return self.phase is Phase.DONE

    @property
    def interrupted(self) -> bool:
        return self.reason is Reason.INTERRUPT

    @property
    def records(self) -> list[RankRecord]:
        for state in self.ranks:
            state.record.stack = bytes(state.stack).decode("utf-8", "replace")
        return [state.record for state in self.ranks]

    def end(self) -> RunEnd:
        """How the run ended, for failures.run_error to judge."""
        return RunEnd(
            nprocs=self.nprocs,
            records=self.records,
            timeout=self.timeout,
            timed_out=self.reason is Reason.TIMEOUT,
            start_failure=self.start_failure if self.reason is Reason.START_FAILED else None,
            launcher_died=self.reason is Reason.LAUNCHER_DIED,
            protocol_error=self.protocol_error if self.reason is Reason.PROTOCOL else None,
            guards=self.req.guards,
        )

    # -- start

    def start(self, listen_socket) -> None:
        """Fork the ranks (through the zygote), each with its pipes; rank 0 gets the socket
        (the store's, bound here, or by a confined zygote where it is None)."""
        child_ends = []
        try:
            for state in self.ranks:
                for kind in ("stdout", "stderr", "ctl", "stack"):
                    r, w = os.pipe()
                    os.set_blocking(r, False)
                    self.fds[r] = (state.record.rank, kind)
                    self.sel.register(r, selectors.EVENT_READ)
                    child_ends.append(w)
            if listen_socket is not None:  # None: the zygote binds it (a confined one)
                child_ends.append(listen_socket.detach())
            self.zygote.send(self.req, child_ends)
        except BaseException:
            self._close_fds()
            raise
        finally:
            for w in child_ends:
                os.close(w)
        self.sel.register(self.zygote.sock, selectors.EVENT_READ)
        self._to(Phase.REQUESTED)  # RUNNING once the zygote says the ranks exist

    # -- the loop

    def poll(self, until: float | None = None) -> bool:
        """Run the event loop until the run is over (True) or `until` passes (False)."""
        while not self.done:
            try:
                self._step()
            except KeyboardInterrupt:
                self._on_interrupt()
            if until is not None and self.clock() >= until and not self.done:
                return False
        return True

    def _on_interrupt(self) -> None:
        """Stop pressed: ask the running ranks where they are (for the cell), then kill
        them; a second press, or one before they exist (the zygote still busy), kills at
        once."""
        first = not self.interrupted
        self._because(Reason.INTERRUPT)
        if first and self.phase is Phase.RUNNING:
            self._dump()
            return
        self._stop(signal.SIGKILL)

    def kill(self) -> None:
        """Stop every rank now and close the run (an error in the loop, an abandoned spawn)."""
        if not self.done:
            self._signal(signal.SIGKILL)
            self._finish()

    def _step(self) -> None:
        now = self.clock()
        self._check_deadlines(now)
        if self.reason is Reason.START_FAILED:  # no rank of this run is left to wait for
            self._finish()
            return
        if self.reason is Reason.PROTOCOL:
            self.kill()
            return
        # Past this, a rank that was SIGKILLed and never reported means the zygote is wedged.
        policy = self.policy
        give_up = policy.wedged_interrupted if self.interrupted else policy.wedged
        if self.phase is Phase.KILLED and now - self.stop_sent_at > give_up:
            self._finish()
            return
        gone = self.reason is Reason.LAUNCHER_DIED
        if gone or all(s.settled(now, policy.drain) for s in self.ranks):
            last_exit = max((s.record.exited_at or now) for s in self.ranks)
            # Output pipes end when the rank (and any child of it) is gone.
            late = now - last_exit > policy.output_after_exit
            if not self._open_output() or late or gone:
                self._finish()
                return
        for key, _ in self.sel.select(timeout=policy.tick):
            try:
                if key.fileobj is self.zygote.sock:
                    self._on_zygote_message()
                else:
                    self._on_pipe(key.fd)
            except ProtocolError as exc:  # the next step stops the ranks
                self.protocol_error = str(exc)
                self._because(Reason.PROTOCOL)
                return
        self._check_failure()

    def _open_output(self) -> bool:
        return any(kind != "stack" for _, kind in self.fds.values())

    def _on_zygote_message(self) -> None:
        try:
            msg, fds = wire.recv(self.zygote.sock)
        except (EOFError, OSError):
            self.sel.unregister(self.zygote.sock)
            self._because(Reason.LAUNCHER_DIED)
            return
        for fd in fds:
            os.close(fd)
        msg = expect(msg, Started, Exited, StartFailed, Refused, sender="the launcher's helper")
        if isinstance(msg, Refused):
            raise ProtocolError(msg.error)
        if msg.id != self.id:
            return
        if isinstance(msg, Started):
            if self.phase is Phase.REQUESTED:  # not when stopped before the ranks existed
                self._to(Phase.RUNNING)
            if self.timeout is not None:
                self.deadline = self.clock() + self.timeout
        elif isinstance(msg, Exited):
            self._on_exit(msg)
        else:
            self.start_failure = msg
            self._because(Reason.START_FAILED)

    def _on_exit(self, msg: Exited) -> None:
        state = self.ranks[msg.rank]
        state.status = msg.status
        state.record.exitcode = os.waitstatus_to_exitcode(msg.status)
        state.record.exited_at = self.clock()
        state.record.stopped = self.stop_sent_at is not None

    def _on_pipe(self, fd: int) -> None:
        rank, kind = self.fds[fd]
        try:
            data = os.read(fd, 1 << 16)
        except BlockingIOError:
            return
        state = self.ranks[rank]
        if not data:
            self.sel.unregister(fd)
            os.close(fd)
            del self.fds[fd]
            if kind in STREAMS:
                self.router.close_stream(rank, kind)
            elif kind == "ctl":
                state.ctl_open = False
            return
        if kind in STREAMS:
            self.router.feed(rank, kind, data)
        elif kind == "ctl":
            for msg in state.ctl.feed(data):
                msg = expect(msg, RankResult, RankError, sender=f"rank {rank}")
                if isinstance(msg, RankResult):
                    state.record.result = msg.value
                else:
                    state.record.error = msg
        else:
            state.stack += data

    def _check_failure(self) -> None:
        if self.reason is not None:  # already stopping, for this reason or another
            return
        now = self.clock()
        if any(
            state.failed or (state.settled(now, self.policy.drain) and not state.record.has_result)
            for state in self.ranks
        ):
            # Stop the others after a moment's grace: a rank that is just returning
            # (its peer's failure is often the sign of a collective it skipped)
            # still gets its result out, and the error can say so.
            self._because(Reason.FAILURE)
            self.stop_at = now + self.policy.grace

    def _check_deadlines(self, now: float) -> None:
        if self.stop_at is not None and self.phase is Phase.RUNNING and now >= self.stop_at:
            self._stop(signal.SIGTERM)
        if self.deadline is not None and now >= self.deadline and self.phase is Phase.RUNNING:
            self._because(Reason.TIMEOUT)
            self._dump()
        if self.phase is Phase.DUMPING:
            live = [s for s in self.ranks if s.status is None]
            have_all = all(s.stack for s in live)
            # Stop pressed: a learner waits, so 1 s at most for the stacks.
            policy = self.policy
            if have_all:
                wait = policy.stacks_in
            else:
                wait = policy.stacks_wait_interrupted if self.interrupted else policy.stacks_wait
            if now - self.dump_sent_at > wait:
                self._stop(signal.SIGKILL)
        if self.phase is Phase.STOPPING and now - self.stop_sent_at > self.policy.term_to_kill:
            self._signal(signal.SIGKILL)
            self._to(Phase.KILLED)  # the wedged timings still count from the SIGTERM

    def _dump(self) -> None:
        """Ask every live rank for its stack (faulthandler answers even inside C++)."""
        self._to(Phase.DUMPING)
        self.dump_sent_at = self.clock()
        self._signal(signal.SIGUSR1, group=False)

    def _signal(self, sig: int, group: bool = True) -> None:
        try:
            self.zygote.send(Signal(self.id, sig, group))
        except OSError:
            self._because(Reason.LAUNCHER_DIED)

    def _stop(self, sig: int) -> None:
        self._to(Phase.KILLED if sig == signal.SIGKILL else Phase.STOPPING)
        self.stop_sent_at = self.clock()
        self._signal(sig)

    def _finish(self) -> None:
        self._to(Phase.DONE)
        self._close_fds()
        self.router.finish()

    def _close_fds(self) -> None:
        for fd in list(self.fds):
            try:
                self.sel.unregister(fd)
            except (KeyError, ValueError):
                pass
            os.close(fd)
        self.fds.clear()
        try:
            self.sel.unregister(self.zygote.sock)
        except (KeyError, ValueError):
            pass
        self.sel.close()
