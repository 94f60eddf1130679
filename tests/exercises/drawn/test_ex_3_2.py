"""Exercise 3.2's check against answers that hard-code what a single configuration keeps fixed
(issue 49; the answers in tests/drawn_answers/ex_3_2.py, also in the sweep): where each
mistake showed is named, and a racing answer is caught on every run."""

from __future__ import annotations

import pytest
from drawn_answers.ex_3_2 import (
    avg_async_never_waited,
    avg_flat_buffer_gathered_off_device,
    avg_float_copy_never_written_back,
    avg_grads_kept_from_the_first_call,
    avg_without_skipping_frozen,
)

from ddp_helpers.exercises import lesson03


@pytest.mark.parametrize(
    "answer, mistake, where",
    [
        (avg_without_skipping_frozen, "avg_frozen", "raised TypeError"),
        (avg_async_never_waited, "avg_not_waited", "never waited for"),
        (avg_float_copy_never_written_back, "avg_copy", "In float64 the gradients"),
        (avg_grads_kept_from_the_first_call, "avg_stale", "At step 2"),
        (avg_flat_buffer_gathered_off_device, "off_device", "all_gather_single"),
    ],
    ids=["frozen", "unwaited", "float copy", "kept grads", "all_gather_single"],
)
def test_average_gradients_answers_that_hold_in_one_configuration_only(answer, mistake, where):
    result = lesson03.q2.evaluate(answer)
    assert result.mistake == mistake, result.message
    assert where in result.message


def test_an_async_all_reduce_never_waited_for_is_caught_every_time():
    misses = [lesson03.q2.evaluate(avg_async_never_waited).mistake for _ in range(20)]
    assert misses == ["avg_not_waited"] * 20
