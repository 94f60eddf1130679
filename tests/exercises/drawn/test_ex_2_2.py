"""Exercise 2.2's check against answers that keep what a first call set up (issue 49; the
answers in tests/drawn_answers/ex_2_2.py, also in the sweep)."""

from __future__ import annotations

import pytest
from drawn_answers.ex_2_2 import setup_joining_behind_a_flag, setup_once_per_process

from ddp_helpers.exercises import lesson02


@pytest.mark.parametrize(
    "answer, other",
    [
        (
            setup_once_per_process,
            "never called init_process_group, pinned nothing and returned cpu",
        ),
        (setup_joining_behind_a_flag, "never called init_process_group, pinned cuda:1"),
    ],
    ids=["device kept", "join kept"],
)
def test_a_setup_that_keeps_its_first_call_says_what_each_process_did(answer, other):
    result = lesson02.q2.evaluate(answer)
    assert result.mistake == "setup_kept", result.message
    # Where the machine came first the answer joined; where it came after others, it did not.
    assert "in one it called init_process_group 1 time(s)" in result.message
    assert f"in the other it {other}" in result.message
