"""The run loop: start the ranks, route their output, watch them, stop them. No wording here:
what it saw of each rank goes out as records (failures.py words and blames them)."""

from __future__ import annotations

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
    ):
        self.policy = policy
        self.zygote = zygote
        self.req = req
        self.id = req.id
        self.nprocs = req.nprocs
        self.timeout = timeout
        self.router = router
        self.ranks = [_Rank(r) for r in range(self.nprocs)]
        self.fds: dict[int, tuple[int, str]] = {}
        self.sel = selectors.DefaultSelector()
        self.phase = "starting"
        self.deadline: float | None = None  # counted from when the ranks exist ("started")
        self.stop_at: float | None = None  # set on the first failure: the others stop then
        self.stop_sent_at: float | None = None
        self.killed = False
        self.dump_sent_at: float | None = None
        self.timed_out = False
        self.interrupted = False
        self.launcher_died = False
        # A message the kernel, the zygote or a rank could not read (protocol.expect).
        self.protocol_error: str | None = None
        # A rank the zygote could not fork; it stopped the ranks already forked, and stays up.
        self.start_failure: StartFailed | None = None
        self.done = False

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
            timed_out=self.timed_out,
            start_failure=self.start_failure,
            launcher_died=self.launcher_died,
            protocol_error=self.protocol_error,
        )

    # -- start

    def start(self, listen_socket) -> None:
        """Fork the ranks (through the zygote), each with its pipes; rank 0 gets the socket."""
        child_ends = []
        try:
            for state in self.ranks:
                for kind in ("stdout", "stderr", "ctl", "stack"):
                    r, w = os.pipe()
                    os.set_blocking(r, False)
                    self.fds[r] = (state.record.rank, kind)
                    self.sel.register(r, selectors.EVENT_READ)
                    child_ends.append(w)
            child_ends.append(listen_socket.detach())
            wire.send(self.zygote.sock, self.req, child_ends)
        except BaseException:
            self._close_fds()
            raise
        finally:
            for w in child_ends:
                os.close(w)
        self.sel.register(self.zygote.sock, selectors.EVENT_READ)
        self.phase = "requested"  # "running" once the zygote says the ranks exist

    # -- the loop

    def poll(self, until: float | None = None) -> bool:
        """Run the event loop until the run is over (True) or `until` passes (False)."""
        while not self.done:
            try:
                self._step()
            except KeyboardInterrupt:
                self._on_interrupt()
            if until is not None and time.monotonic() >= until and not self.done:
                return False
        return True

    def _on_interrupt(self) -> None:
        """Stop pressed: ask the running ranks where they are (for the cell), then kill
        them; a second press, or one before they exist (the zygote still busy), kills at
        once."""
        now = time.monotonic()
        if not self.interrupted and self.phase == "running":
            self.interrupted = True
            self.phase = "dumping"
            self.dump_sent_at = now
            self._signal(signal.SIGUSR1, group=False)
            return
        self.interrupted = True
        self._stop(signal.SIGKILL)

    def kill(self) -> None:
        """Stop every rank now and close the run (an error in the loop, an abandoned spawn)."""
        if not self.done:
            self._signal(signal.SIGKILL)
            self._finish()

    def _step(self) -> None:
        now = time.monotonic()
        self._check_deadlines(now)
        if self.start_failure is not None:  # no rank of this run is left to wait for
            self._finish()
            return
        if self.protocol_error is not None:
            self.kill()
            return
        # Past this, a rank that was SIGKILLed and never reported means the zygote is wedged.
        policy = self.policy
        give_up = policy.wedged_interrupted if self.interrupted else policy.wedged
        if self.killed and now - self.stop_sent_at > give_up:
            self._finish()
            return
        if all(s.settled(now, policy.drain) for s in self.ranks) or self.launcher_died:
            last_exit = max((s.record.exited_at or now) for s in self.ranks)
            # Output pipes end when the rank (and any child of it) is gone.
            late = now - last_exit > policy.output_after_exit
            if not self._open_output() or late or self.launcher_died:
                self._finish()
                return
        for key, _ in self.sel.select(timeout=0.05):
            try:
                if key.fileobj is self.zygote.sock:
                    self._on_zygote_message()
                else:
                    self._on_pipe(key.fd)
            except ProtocolError as exc:  # the next step stops the ranks
                self.protocol_error = str(exc)
                return
        self._check_failure()

    def _open_output(self) -> bool:
        return any(kind != "stack" for _, kind in self.fds.values())

    def _on_zygote_message(self) -> None:
        try:
            msg, fds = wire.recv(self.zygote.sock)
        except (EOFError, OSError):
            self.sel.unregister(self.zygote.sock)
            self.launcher_died = True
            return
        for fd in fds:
            os.close(fd)
        msg = expect(msg, Started, Exited, StartFailed, Refused, sender="the launcher's helper")
        if isinstance(msg, Refused):
            raise ProtocolError(msg.error)
        if msg.id != self.id:
            return
        if isinstance(msg, Started):
            if self.phase == "requested":
                self.phase = "running"
            if self.timeout is not None:
                self.deadline = time.monotonic() + self.timeout
        elif isinstance(msg, Exited):
            self._on_exit(msg)
        else:
            self.start_failure = msg

    def _on_exit(self, msg: Exited) -> None:
        state = self.ranks[msg.rank]
        state.status = msg.status
        state.record.exitcode = os.waitstatus_to_exitcode(msg.status)
        state.record.exited_at = time.monotonic()
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
        if self.stop_at is not None or self.timed_out or self.interrupted:
            return
        now = time.monotonic()
        if any(
            state.failed
            or (
                state.settled(now, self.policy.drain)
                and not state.record.has_result
                and not self.killed
            )
            for state in self.ranks
        ):
            # Stop the others after a moment's grace: a rank that is just returning
            # (its peer's failure is often the sign of a collective it skipped)
            # still gets its result out, and the error can say so.
            self.stop_at = now + self.policy.grace

    def _check_deadlines(self, now: float) -> None:
        if self.stop_at is not None and self.phase == "running" and now >= self.stop_at:
            self._stop(signal.SIGTERM)
        if self.deadline is not None and now >= self.deadline and self.phase == "running":
            # Ask every live rank for its stack (faulthandler answers even inside C++).
            self.timed_out = True
            self.phase = "dumping"
            self.dump_sent_at = now
            self._signal(signal.SIGUSR1, group=False)
        if self.phase == "dumping":
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
        stopping = self.phase == "stopping" and not self.killed
        if stopping and now - self.stop_sent_at > self.policy.term_to_kill:
            self._signal(signal.SIGKILL)
            self.killed = True

    def _signal(self, sig: int, group: bool = True) -> None:
        try:
            wire.send(self.zygote.sock, Signal(self.id, sig, group))
        except OSError:
            self.launcher_died = True

    def _stop(self, sig: int) -> None:
        self.phase = "stopping"
        self.stop_sent_at = time.monotonic()
        self.killed = self.killed or sig == signal.SIGKILL
        self._signal(sig)

    def _finish(self) -> None:
        self.done = True
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
