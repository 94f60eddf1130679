"""Run's escalation, by its own clock: the steps and their timings (plan.StopPolicy) on an
injected clock, against a fake zygote that records the signals it is asked to send and
answers with the messages a real one would (Started, Exited). No process is started."""

from __future__ import annotations

import signal
import socket
from types import SimpleNamespace

import pytest

from ddp_helpers.launcher import wire
from ddp_helpers.launcher.output import OutputRouter
from ddp_helpers.launcher.plan import STOP
from ddp_helpers.launcher.protocol import Exited, RankError, Signal, Started
from ddp_helpers.launcher.run import Phase, Reason, Run


class FakeZygote:
    """The kernel's side of the zygote's socket; `peer` is the zygote's side."""

    def __init__(self):
        self.sock, self.peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sent: list = []

    def send(self, msg, fds=()) -> None:
        self.sent.append(msg)

    def signals(self) -> list[tuple[int, bool]]:
        return [(m.signal, m.group) for m in self.sent if isinstance(m, Signal)]

    def tell(self, msg) -> None:
        wire.send(self.peer, msg)

    def close(self) -> None:
        self.sock.close()
        self.peer.close()


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def started():
    """A run of 2 ranks the fake zygote has Started, at time 100 on its clock."""
    zygote, clock = FakeZygote(), Clock()
    req = SimpleNamespace(id="r1", nprocs=2)
    router = OutputRouter(2, ordered=False, sink=lambda stream, text: None, clock=clock)
    run = Run(zygote, req, timeout=5.0, router=router, clock=clock)
    run.start(socket.socket())
    zygote.tell(Started("r1"))
    run._step()
    assert run.phase is Phase.RUNNING and run.deadline == 105.0
    yield run, zygote, clock
    if not run.done:
        run.kill()
    zygote.close()


def _at(run, clock, when: float) -> None:
    clock.now = when
    run._step()


def _error(rank: int) -> RankError:
    return RankError("ValueError", "builtins", f"rank {rank} failed", "", 0.0)


def test_a_failure_stops_the_others_after_the_grace_then_kills(started):
    run, zygote, clock = started
    run.ranks[1].record.error = _error(1)  # as its control pipe would have said
    _at(run, clock, 100.0)
    assert run.reason is Reason.FAILURE and zygote.signals() == []
    _at(run, clock, 100.0 + STOP.grace * 0.9)
    assert zygote.signals() == []  # a returning rank still gets its result out
    _at(run, clock, 100.0 + STOP.grace)
    assert zygote.signals() == [(signal.SIGTERM, True)] and run.phase is Phase.STOPPING
    _at(run, clock, 100.0 + STOP.grace + STOP.term_to_kill * 0.9)
    assert len(zygote.signals()) == 1
    _at(run, clock, 100.0 + STOP.grace + STOP.term_to_kill + 0.01)
    assert zygote.signals()[-1] == (signal.SIGKILL, True) and run.phase is Phase.KILLED


def test_the_timeout_asks_for_stacks_then_kills_when_they_do_not_come(started):
    run, zygote, clock = started
    _at(run, clock, 104.9)
    assert zygote.signals() == []
    _at(run, clock, 105.0)
    assert run.reason is Reason.TIMEOUT and run.phase is Phase.DUMPING
    assert zygote.signals() == [(signal.SIGUSR1, False)]  # each rank, not its children
    _at(run, clock, 105.0 + STOP.stacks_wait * 0.9)
    assert len(zygote.signals()) == 1  # still waiting for the stacks
    _at(run, clock, 105.0 + STOP.stacks_wait + 0.01)
    assert zygote.signals()[-1] == (signal.SIGKILL, True) and run.phase is Phase.KILLED


def test_with_every_stack_in_the_kill_comes_sooner(started):
    run, zygote, clock = started
    _at(run, clock, 105.0)
    for state in run.ranks:
        state.stack += b"Thread 0x1 (most recent call first):\n"
    _at(run, clock, 105.0 + STOP.stacks_in + 0.01)
    assert zygote.signals()[-1] == (signal.SIGKILL, True)


def test_stop_pressed_asks_for_stacks_a_second_press_kills_at_once(started):
    run, zygote, clock = started
    run._on_interrupt()
    assert run.reason is Reason.INTERRUPT and run.phase is Phase.DUMPING
    assert zygote.signals() == [(signal.SIGUSR1, False)]
    _at(run, clock, 100.0 + STOP.stacks_wait_interrupted * 0.9)
    assert len(zygote.signals()) == 1
    run._on_interrupt()  # pressed again
    assert zygote.signals()[-1] == (signal.SIGKILL, True) and run.phase is Phase.KILLED


def test_stop_pressed_waits_at_most_its_own_time_for_the_stacks(started):
    run, zygote, clock = started
    run._on_interrupt()
    _at(run, clock, 100.0 + STOP.stacks_wait_interrupted + 0.01)
    assert zygote.signals()[-1] == (signal.SIGKILL, True)


def test_a_killed_rank_that_never_reports_means_a_wedged_zygote_and_the_run_ends(started):
    run, zygote, clock = started
    run._on_interrupt()
    run._on_interrupt()  # killed at 100.0
    zygote.tell(Exited("r1", 0, 9))  # rank 0 reported; rank 1 never does
    _at(run, clock, 100.0 + STOP.wedged_interrupted * 0.9)
    assert not run.done
    _at(run, clock, 100.0 + STOP.wedged_interrupted + 0.01)
    assert run.done


def test_every_rank_exited_ends_the_run_once_their_output_is_in(started):
    run, zygote, clock = started
    for rank in (0, 1):
        run.ranks[rank].record.result = b"returned"  # as its control pipe would have said
        zygote.tell(Exited("r1", rank, 0))
    # Their pipes' write ends were the fake fork's: closed, so every pipe reads its end.
    deadline = 100.0 + STOP.output_after_exit + STOP.drain
    while not run.done and clock.now <= deadline:
        _at(run, clock, clock.now + 0.1)
    assert run.done and zygote.signals() == [] and run.reason is None  # no stop: it ended
