"""Exercise 4.2's check (make_loader) against answers that hard-code what a single
configuration keeps fixed (issue 49; the answers in tests/drawn_answers/ex_4_2.py, also in
the sweep): where each mistake showed is named, and each message is true of its answer."""

from __future__ import annotations

import pytest
from drawn_answers.ex_4_2 import (
    loader_for_two_ranks,
    loader_kept_in_a_default_argument,
    loader_with_the_first_calls_sampler,
    loader_with_the_notebooks_global_batch,
)

from ddp_helpers.exercises.lesson04 import loader


@pytest.mark.parametrize(
    "answer, mistake, said",
    [
        # The notebook's 16 on 2 ranks: 8 rows each, where the check gave a global batch of 12.
        (loader_with_the_notebooks_global_batch, "loader_batch", "became 16 (2 ranks x 8), not 12"),
        # global_batch // 2 is each rank's part on 2 ranks only.
        (loader_for_two_ranks, "loader_batch", "Seen with 3 ranks, 1 machine(s)"),
        # The first call's 60 items dealt again in the second call, given 108.
        (loader_with_the_first_calls_sampler, "loader_stale", "a data set of 72 items"),
        (loader_kept_in_a_default_argument, "loader_stale", "call 2 of the answer"),
    ],
    ids=["notebook's batch", "two ranks", "kept sampler", "kept loader"],
)
def test_make_loader_answers_that_hold_in_one_configuration_only(answer, mistake, said):
    result = loader.exercise.evaluate(answer)
    assert result.mistake == mistake, result.message
    assert said in result.message


def test_the_grader_draws_other_data_sets_and_global_batches_than_check():
    from ddp_helpers.exercises.space import CHECK_SEED, HIDDEN_SEEDS

    drawn = {seed: loader._calls(seed) for seed in (CHECK_SEED, *HIDDEN_SEEDS)}
    assert len({tuple(calls) for calls in drawn.values()}) == len(drawn)
    for calls in drawn.values():
        assert len({n for n, _ in calls}) == 2 and len({batch for _, batch in calls}) == 2
