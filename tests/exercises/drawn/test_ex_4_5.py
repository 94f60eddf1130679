"""Exercise 4.5's check against answers that hold in one configuration only (issue 49; the
answers in tests/drawn_answers/ex_4_5.py, also in the sweep): where each mistake showed is
named, what each message says is true of its answer, and a racing answer is caught on every
run."""

from __future__ import annotations

import pytest
from drawn_answers.ex_4_5 import (
    save_the_momentum_in_bfloat16,
    save_the_optimizer_state_copied_once,
    save_the_parameters_alone,
    save_the_weights_in_float32,
    save_then_an_async_barrier,
    save_then_broadcast_a_flag_made_on_the_cpu,
    save_with_a_barrier_of_ranks_zero_and_one,
)

from ddp_helpers.exercises import lesson04


@pytest.mark.parametrize(
    "answer, mistake, where",
    [
        (save_the_momentum_in_bfloat16, "save_optimizer", "its momentum differs by up to"),
        (save_the_optimizer_state_copied_once, "save_optimizer", "call 2 of the answer"),
        (save_the_parameters_alone, "save_strict", '"1.running_mean"'),
        (save_the_weights_in_float32, "save_weights", "saved as float32, where the model"),
        (save_then_broadcast_a_flag_made_on_the_cpu, "off_device", "broadcast()"),
    ],
    ids=["bfloat16 momentum", "state copied once", "no buffers", "float32", "cpu flag"],
)
def test_save_checkpoint_answers_that_hold_in_one_configuration_only(answer, mistake, where):
    result = lesson04.q5.evaluate(answer)
    assert result.mistake == mistake, result.message
    assert where in result.message


def test_a_rank_outside_the_barriers_group_is_the_rank_named():
    result = lesson04.q5.evaluate(save_with_a_barrier_of_ranks_zero_and_one)
    assert result.mistake == "save_barrier", result.message
    assert result.fields["rank"] == 2 and result.tried["ranks"] == 3  # rank 1 did wait


def test_a_float32_checkpoint_is_named_where_the_model_is_float64():
    result = lesson04.q5.evaluate(save_the_weights_in_float32)
    assert result.tried["weights"] == "float64"
    assert result.fields["how"].fields == {"got": "float32", "want": "float64"}


@pytest.mark.parametrize(
    "answer", [save_with_a_barrier_of_ranks_zero_and_one, save_then_an_async_barrier]
)
def test_a_barrier_that_does_not_hold_every_rank_is_caught_every_time(answer):
    misses = [lesson04.q5.evaluate(answer).mistake for _ in range(20)]
    assert misses == ["save_barrier"] * 20
