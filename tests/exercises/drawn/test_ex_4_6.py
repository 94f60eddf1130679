"""Exercise 4.6's check against answers that hold in one configuration only (issue 49; the
answers in tests/drawn_answers/ex_4_6.py, also in the sweep): where each mistake showed is
named, and what each message says is true of its answer."""

from __future__ import annotations

from drawn_answers.ex_4_6 import (
    load_once_and_keep_it,
    load_the_parameters_alone,
    load_through_float32,
)

from ddp_helpers.exercises import lesson04
from ddp_helpers.exercises.lesson04.save import _make_net


def test_a_load_of_the_parameters_alone_names_exactly_the_buffers_left():
    result = lesson04.q6.evaluate(load_the_parameters_alone)
    assert result.mistake == "load_buffers", result.message
    buffers = [name for name, _ in _make_net().named_buffers()]
    assert result.fields["names"].items == buffers


def test_weights_loaded_through_float32_are_named_where_the_model_is_float64():
    result = lesson04.q6.evaluate(load_through_float32)
    assert result.mistake == "load_weights", result.message
    assert result.tried["weights"] == "float64"
    assert 0 < result.fields["diff"] < 1e-6  # float32's rounding, no more


def test_a_checkpoint_kept_from_the_first_call_is_named_at_the_second():
    result = lesson04.q6.evaluate(load_once_and_keep_it)
    assert result.mistake == "load_weights", result.message
    assert result.tried["call"] == 2
