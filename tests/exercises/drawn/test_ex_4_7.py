"""Exercise 4.7's check against answers that hold in one configuration only (issue 49; the
answers in tests/drawn_answers/ex_4_7.py, also in the sweep): where each mistake showed is
named, what each message says is true of its answer, and a racing answer is caught on every
run."""

from __future__ import annotations

import pytest
import torch
from drawn_answers.ex_4_7 import (
    gather_async_never_waited,
    gather_into_a_fixed_capacity,
    gather_on_rank_zero_alone,
    gather_padded_in_front,
    gather_through_float32,
    gather_through_float64,
    gather_with_the_shares_exchanged_once,
)

from ddp_helpers.exercises import lesson04


@pytest.mark.parametrize(
    "answer, mistake, where",
    [
        (gather_through_float32, "gather_rounded", "went through float32"),
        (gather_through_float64, "gather_rounded", "went through float64"),
        (gather_into_a_fixed_capacity, "gather_count", "holding 5, 0 and 13 values"),
        (gather_with_the_shares_exchanged_once, "gather_count", "call 2 of the answer"),
        (gather_async_never_waited, "gather_not_waited", "never waited for"),
        (gather_padded_in_front, "gather_values", "came back as 0.0"),
    ],
    ids=["float32", "float64", "capacity", "shares kept", "unwaited", "padded in front"],
)
def test_gather_all_answers_that_hold_in_one_configuration_only(answer, mistake, where):
    result = lesson04.q7.evaluate(answer)
    assert result.mistake == mistake, result.message
    assert where in result.message


@pytest.mark.parametrize("answer", [gather_through_float32, gather_through_float64])
def test_a_value_named_rounded_is_the_sent_value_rounded_through_the_dtype_named(answer):
    fields = lesson04.q7.evaluate(answer).fields
    dtype, via = getattr(torch, fields["dtype"]), getattr(torch, fields["via"])
    assert torch.tensor(fields["sent"], dtype=dtype).to(via).to(dtype).item() == fields["got"]
    assert fields["sent"] != fields["got"]


def test_a_share_past_a_small_capacity_and_a_second_call_are_named():
    capacity = lesson04.q7.evaluate(gather_into_a_fixed_capacity)
    assert capacity.fields["got"] < capacity.fields["want"]  # the values past 8 lost
    assert max(capacity.tried["lengths"].items) > 8
    shares = lesson04.q7.evaluate(gather_with_the_shares_exchanged_once)
    assert shares.tried["call"] == 2  # right on the first call


def test_rank_zero_gathering_alone_is_named_not_the_probes_error():
    result = lesson04.q7.evaluate(gather_on_rank_zero_alone)
    assert (result.status, result.mistake) == ("wrong", "mismatch"), result.message
    assert "DistStoreError" not in result.message


def test_an_async_all_gather_never_waited_for_is_caught_every_time():
    misses = [lesson04.q7.evaluate(gather_async_never_waited).mistake for _ in range(20)]
    assert misses == ["gather_not_waited"] * 20
