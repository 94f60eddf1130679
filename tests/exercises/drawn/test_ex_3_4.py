"""Exercise 3.4's check against answers that hold in one configuration only (issue 49; the
answers in tests/drawn_answers/ex_3_4.py, also in the sweep): where each mistake showed is
named, and what each message says is true of its answer."""

from __future__ import annotations

import pytest
from drawn_answers.ex_3_4 import (
    accumulate_summed_over_two_rows,
    accumulate_three_steps,
    accumulate_with_k_set_up_once,
    accumulate_zeroing_after_the_first_micro_batch,
    accumulate_zeroing_each_gradient_by_hand,
)

from ddp_helpers.exercises import lesson03
from ddp_helpers.exercises.lesson03.accumulate import NOTEBOOK, SPACE


@pytest.mark.parametrize(
    "answer, mistake, where",
    [
        (accumulate_zeroing_after_the_first_micro_batch, "accum_lost", "micro-batch(es) 1 of"),
        (accumulate_three_steps, "accum_steps", "stepped 3 times"),
        (accumulate_with_k_set_up_once, "accum_steps", "call 2 of the answer"),
        (accumulate_zeroing_each_gradient_by_hand, "accum_frozen", "raised AttributeError"),
    ],
    ids=["zeroed after the first", "3 steps", "k set up once", "frozen"],
)
def test_train_accumulated_answers_that_hold_in_one_configuration_only(answer, mistake, where):
    result = lesson03.q4.evaluate(answer)
    assert result.mistake == mistake, result.message
    assert where in result.message


def test_zeroing_after_the_first_micro_batch_is_not_told_to_divide_by_k():
    result = lesson03.q4.evaluate(accumulate_zeroing_after_the_first_micro_batch)
    assert result.hint_name != "accum_mean"
    assert "divide each" not in str(result).lower() and "by k" not in str(result)


def test_a_sum_over_two_rows_is_named_by_the_ratio_it_makes():
    result = lesson03.q4.evaluate(accumulate_summed_over_two_rows)
    assert result.mistake == "accum_weights", result.message
    rows = result.tried["rows"]  # a micro-batch's rows: never the notebook's 2
    assert rows != NOTEBOOK["micro"]
    assert result.fields["how"].fields["ratio"] == pytest.approx(rows / 2, rel=1e-3)


def test_no_count_drawn_is_the_notebooks():
    for name, value in NOTEBOOK.items():
        assert value not in SPACE.drawn["counts"][name]
