"""What each exercise declares of its check's time (Exercise.hang_timeout, run_time), which
the grader's budget reads (TimeBudget.check): held on the reference answer, every case run,
the grader's hidden ones too."""

from __future__ import annotations

import pytest

from ddp_helpers.exercises import LESSONS, exercises_of, running

EXERCISES = [ex for lesson in LESSONS for ex in exercises_of(lesson)]


def _nothing():
    return None


@pytest.fixture(scope="module", autouse=True)
def warm_launcher():
    """The launcher's helper started and warmed for DDP once, as in a notebook after its
    first launch: a check's time is its own, not the helper's start (about 5 s here)."""
    from ddp_helpers import launch
    from ddp_helpers.launcher import client

    client.expect_ddp()
    launch(_nothing, nprocs=1)  # waits for the warm-up, as a launch from an idle helper


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda ex: ex.id)
def test_a_check_stays_within_what_its_exercise_declares(ex, monkeypatch):
    launches = []
    real = running._launched

    def watched(harness, answer, args, nprocs, nnodes, timeout):
        launches.append(timeout)
        return real(harness, answer, args, nprocs, nnodes, timeout)

    monkeypatch.setattr(running, "_launched", watched)
    assert ex.evaluate(ex.reference).passed
    if ex._hidden is not None:
        assert ex._run(ex._hidden, ex.reference).passed
    assert launches, "every check runs the answer through run_on_ranks or run_answer"
    # A launch waits at most the declared time before it names a hang. (That the cases pass
    # within a fifth of the time declared for them is a budget: `make bench-checks`.)
    assert max(launches) <= ex.hang_timeout, (launches, ex.hang_timeout)
