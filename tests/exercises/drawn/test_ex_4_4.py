"""Exercise 4.4's check (evaluate) against answers that hard-code what a single configuration
keeps fixed (issue 49; the answers in tests/drawn_answers/ex_4_4.py, also in the sweep):
where each mistake showed is named, and each message is true of its answer."""

from __future__ import annotations

import pytest
from drawn_answers.ex_4_4 import (
    evaluate_counting_into_a_default_argument,
    evaluate_sharded_by_local_rank,
    evaluate_split_for_two_ranks,
    evaluate_with_the_loader_of_its_first_call,
)

from ddp_helpers.exercises.lesson04 import evaluate


@pytest.mark.parametrize(
    "answer, mistake, said",
    [
        # The second call (513 examples) counted the first call's 517 again.
        (evaluate_with_the_loader_of_its_first_call, "eval_stale", "it counted 517"),
        (evaluate_with_the_loader_of_its_first_call, "eval_stale", "call 2 of the answer"),
        # The first call's 517, already reduced, summed again on 2 ranks: 2 x 517 + 513.
        (evaluate_counting_into_a_default_argument, "eval_accumulated", "it counted 1547"),
        # Every machine's 2 ranks went through all 1035 examples.
        (evaluate_sharded_by_local_rank, "eval_machines", "Seen with 4 ranks, 2 machine(s)"),
        (evaluate_sharded_by_local_rank, "eval_machines", "counted 2 times"),
        # Ranks 0 and 2 of 3 both took the even examples: 388 of 776 counted twice.
        (evaluate_split_for_two_ranks, "eval_counted_extra", "1164 examples"),
        (evaluate_split_for_two_ranks, "eval_counted_extra", "Seen with 3 ranks"),
    ],
    ids=["stale", "stale call", "accumulated", "machines", "machines twice", "two", "3 ranks"],
)
def test_evaluate_answers_that_hold_in_one_configuration_only(answer, mistake, said):
    result = evaluate.exercise.evaluate(answer)
    assert result.mistake == mistake, result.message
    assert said in result.message


@pytest.mark.parametrize("world", [2, 3, 4])
def test_each_layouts_data_sets_show_the_padding_and_uneven_batches(world):
    from torch.utils.data import DistributedSampler

    from ddp_helpers.exercises.space import CHECK_SEED, HIDDEN_SEEDS

    for seed in (CHECK_SEED, *HIDDEN_SEEDS):
        padded, uneven = evaluate._lengths(world, seed)
        shares = [len(range(r, padded, world)) for r in range(world)]
        assert padded % world and all(s % evaluate.BATCH != 1 for s in shares)
        assert len(list(DistributedSampler(range(padded), world, 0, shuffle=False))) > min(shares)
        batches = [-(-len(range(r, uneven, world)) // evaluate.BATCH) for r in range(world)]
        assert batches[0] == batches[-1] + 1  # rank 0 one forward more: gradients on hang
    assert evaluate._lengths(2, CHECK_SEED) == (517, 513)  # the prompt's data sets
