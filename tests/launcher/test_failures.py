"""Blame, wording and output routing as logic: records in, errors and lines out, no processes."""

from __future__ import annotations

import pickle

import pytest

from ddp_helpers.launcher.failures import (
    DistributedError,
    RankFailure,
    RankRecord,
    RunEnd,
    blame,
    exit_quirks,
    failure_of,
    failure_report,
    interrupt_report,
    run_error,
    timeout_report,
)
from ddp_helpers.launcher.protocol import RankError, StartFailed

PEER = "Connection closed by peer [127.0.0.1]:1234"


def raised(rank, message="boom", at=1.0, exc_type="RuntimeError"):
    tb = f'Traceback (most recent call last):\n  File "x.py", line 3, in f\n{exc_type}: {message}'
    return RankFailure(rank, "exception", exc_type, message, tb, exitcode=1, at=at)


def exited(rank, code, at=1.0, stopped=False, stack=None):
    return RankFailure(
        rank, "signal" if code < 0 else "exit", exitcode=code, at=at, stopped=stopped, stack=stack
    )


# ---------------------------------------------------------------- blame


@pytest.mark.parametrize(
    ("failures", "cause"),
    [
        # the rank that raised first
        ([raised(0, at=2.0), raised(2, at=1.0)], 2),
        # a peer's "closed by peer" is a victim, even when it came first
        ([raised(0, PEER, at=1.0), raised(1, "the real one", at=2.0)], 1),
        # a rank the launcher stopped is a victim, even when it exited first
        ([exited(1, -15, at=1.0, stopped=True), exited(2, 7, at=2.0)], 2),
        # a crash is a cause; the victims of it see their peer gone
        ([exited(2, -9, at=1.5), raised(0, PEER, at=1.0), raised(1, PEER, at=1.1)], 2),
        # two real causes: the earlier one
        ([exited(0, 3, at=5.0), raised(1, at=4.0)], 1),
    ],
)
def test_the_rank_that_caused_it_is_blamed_not_its_victims(failures, cause):
    assert blame(failures)[0].rank == cause


def test_without_known_error_text_the_earliest_failure_is_blamed():
    failures = [raised(0, PEER, at=1.0), raised(1, "the real one", at=2.0)]
    assert blame(failures, peer_text=False)[0].rank == 0


# ---------------------------------------------------------------- wording


def test_the_report_leads_with_the_cause_and_lists_real_other_failures():
    failures = [raised(1, "bad batch", at=1.0), raised(0, PEER, at=1.2), exited(2, -15, 1.3, True)]
    paragraph, report, first = failure_report(failures, nprocs=3, returned=[])
    assert first.rank == 1
    assert paragraph == (
        "rank 1 raised RuntimeError: bad batch. 1 other rank(s) failed after it "
        "(err.failures has each). The other ranks were stopped."
    )
    assert report.startswith("rank 1 raised RuntimeError: bad batch\n\nTraceback of rank 1")
    assert f"rank 0 also failed: rank 0 raised RuntimeError: {PEER}" in report
    assert "rank 2 also failed" not in report  # stopped by the launcher, no error of its own


def test_a_victim_of_a_rank_that_returned_early_gets_the_collective_hint():
    _, report, _ = failure_report([raised(0, PEER)], nprocs=2, returned=[1])
    assert "rank 1 had already returned when this happened" in report
    assert "inside `if rank == 0:`" in report


def test_the_paragraph_leads_with_the_collective_only_some_ranks_made():
    waited = (
        "Traceback (most recent call last):\n"
        '  File "<cell>", line 7, in f\n'
        '  File "/t/torch/distributed/c10d_logger.py", line 83, in wrapper\n'
        '  File "/t/torch/distributed/distributed_c10d.py", line 2870, in all_reduce\n'
        '  File "/t/torch/distributed/distributed_c10d.py", line 900, in _wait\n'
        f"RuntimeError: {PEER}\n"
    )
    failure = RankFailure(0, "exception", "RuntimeError", PEER, waited, exitcode=1, at=1.0)
    paragraph, _, _ = failure_report([failure], nprocs=3, returned=[1, 2])
    assert paragraph.startswith(
        "ranks 1 and 2 returned while rank 0 waited in `all_reduce`: a collective only some "
        "ranks make, like one inside `if rank == 0:`. rank 0 raised RuntimeError"
    ), paragraph
    paragraph, _, _ = failure_report([raised(0, PEER)], nprocs=2, returned=[1])
    assert paragraph.startswith("rank 1 returned while rank 0 waited in a collective:")


def test_a_sigkilled_rank_gets_the_out_of_memory_hint_and_its_stack():
    stack = '  File "x.py", line 9, in step\n    huge = torch.zeros(10**12)'
    paragraph, report, _ = failure_report([exited(0, -9, stack=stack)], nprocs=1, returned=[])
    assert paragraph == "rank 0 was killed by SIGKILL (signal 9)"
    assert "Python stack of rank 0 when it died" in report and "huge = torch.zeros" in report
    assert "out of memory" in report and "other ranks" not in report


@pytest.mark.parametrize(
    ("failure", "says"),
    [
        (exited(0, 7), "rank 0 exited with code 7 before returning a result"),
        (exited(0, 0), "rank 0 exited (code 0) without returning a result"),
        (exited(0, -11), "rank 0 was killed by SIGSEGV (signal 11)"),
        (RankFailure(0, "exception", "SystemExit", "2"), "rank 0 called sys.exit(2)"),
        (RankFailure(0, "exit"), "rank 0 did not finish"),
    ],
)
def test_each_way_of_ending_has_its_own_words(failure, says):
    assert failure.summary().startswith(says)


def test_a_timeout_says_where_each_rank_waited():
    stacks = [
        RankFailure(0, "timeout", stack="  Cell In[5], line 3, in train\n    dist.barrier()"),
        RankFailure(1, "timeout", finished=True),
        RankFailure(2, "timeout"),
    ]
    paragraph, report = timeout_report(2, stacks)
    assert paragraph == (
        "The run did not finish within 2 s, so every rank was stopped. "
        "rank 0 was at Cell In[5], line 3, in train."
    )
    assert "rank 0:\n  Cell In[5], line 3, in train" in report
    assert "rank 1: had already finished" in report
    assert "rank 2: gave no stack" in report and "inside `if rank == 0:`" in report


# ---------------------------------------------------------------- records to failures


def test_records_become_failures_or_none():
    relabel = lambda text: text.replace("<cell>", "Cell In[2]")  # noqa: E731
    render = lambda text: f"rendered({text})"  # noqa: E731
    error = RankError("KeyError", "builtins", "'x'", "in <cell>", time=3.0)
    failure = failure_of(RankRecord(1, exitcode=1, error=error), relabel, render)
    assert (failure.kind, failure.exc_type, failure.traceback, failure.at) == (
        "exception",
        "KeyError",
        "in Cell In[2]",
        3.0,
    )
    assert failure_of(RankRecord(0, exitcode=-6, result=b"x"), relabel, render) is None
    killed = failure_of(RankRecord(2, -9, 4.0, stack="dump", stopped=True), relabel, render)
    assert (killed.kind, killed.signal, killed.stack, killed.stopped) == (
        "signal",
        "SIGKILL",
        "rendered(dump)",
        True,
    )


def same(text):
    return text


def test_a_run_where_every_rank_returned_raises_nothing_and_warns_of_crashes_at_exit():
    records = [RankRecord(0, exitcode=0, result=b"a"), RankRecord(1, exitcode=-6, result=b"b")]
    assert run_error(RunEnd(2, records), same, same) is None
    (warning,) = exit_quirks(records)
    assert warning.startswith("[ddp_helpers] warning: rank 1 was killed by SIGABRT")


def test_how_a_run_ended_decides_its_error():
    error = RankError("ValueError", "builtins", "bad", "tb", time=1.0, exception=None)
    raised_one = [RankRecord(0, result=b"x"), RankRecord(1, exitcode=1, error=error)]
    failed = run_error(RunEnd(2, raised_one), same, same)
    assert (failed.kind, failed.rank, failed.returned_ranks) == ("exception", 1, [0])
    fork = StartFailed(
        "id", rank=3, error="[Errno 11] Resource temporarily unavailable", nproc_limit=8
    )
    started = run_error(RunEnd(4, raised_one, start_failure=fork), same, same)
    assert (started.kind, started.rank) == ("start", 3)
    assert "Rank 3 of 4 could not be started" in str(started) and "at most 8" in str(started)
    confused = run_error(RunEnd(2, [], protocol_error="got dict"), same, same)
    assert confused.kind == "launcher"
    assert "did not understand each other (got dict)" in str(confused)
    died = run_error(RunEnd(2, [], launcher_died=True), same, same)
    assert died.kind == "launcher" and "died unexpectedly" in str(died)
    stuck = [RankRecord(0, stack="dump"), RankRecord(1, result=b"x")]
    late = run_error(RunEnd(2, stuck, timeout=5, timed_out=True), same, same)
    assert late.kind == "timeout" and sorted(late.failures) == [0]


def test_an_interrupt_shows_where_each_rank_was_if_any_said():
    assert interrupt_report([RankRecord(0), RankRecord(1)], same) is None
    text = interrupt_report([RankRecord(0, stack="in f"), RankRecord(1)], same)
    assert text.startswith("Interrupted: every rank was stopped.") and "rank 0:\nin f" in text


def test_the_error_keeps_every_failure_pickles_and_renders_for_ipython():
    failures = {1: raised(1, "bad"), 0: raised(0, PEER)}
    err = DistributedError(
        "rank 1 raised RuntimeError: bad.", kind="exception", failures=failures, rank=1,
        report="the full report", returned_ranks=[2], original=RuntimeError("bad"),
    )  # fmt: skip
    assert (err.exc_type, err.exc_message, err.exitcode, err.signal_name) == (
        "RuntimeError",
        "bad",
        1,
        None,
    )
    assert err._render_traceback_() == [
        "DistributedError: rank 1 raised RuntimeError: bad.",
        "",
        "the full report",
    ]
    again = pickle.loads(pickle.dumps(err))
    assert (again.failures, again.report, again.returned_ranks) == (
        failures,
        "the full report",
        [2],
    )
    assert str(again) == str(err) and isinstance(again.original, RuntimeError)

    class Unpicklable(Exception):
        def __reduce__(self):
            raise TypeError("no")

    err.original = Unpicklable()
    assert pickle.loads(pickle.dumps(err)).original is None


def test_a_collective_mismatch_is_an_abort_inside_c10d_or_a_peer_gone_after_a_return():
    stack = '  File ".../torch/distributed/distributed_c10d.py", line 5, in all_reduce'
    aborted = DistributedError("x", kind="signal", failures={0: exited(0, -6, stack=stack)}, rank=0)
    assert aborted.mismatch == "abort"
    other = DistributedError("x", kind="signal", failures={0: exited(0, -6)}, rank=0)
    assert other.mismatch is None
    victim = raised(1, message=PEER)
    left = DistributedError("x", kind="exception", failures={1: victim}, rank=1, returned_ranks=[0])
    assert left.mismatch == "returned"
    alone = DistributedError("x", kind="exception", failures={1: victim}, rank=1)
    assert alone.mismatch is None
