"""Exercise 2.3's check against answers that keep a flag or leave only some ranks (issue 49;
the answers in tests/drawn_answers/ex_2_3.py, also in the sweep)."""

from __future__ import annotations

from drawn_answers.ex_2_3 import cleanup_behind_a_flag, cleanup_on_the_first_two_ranks

from ddp_helpers.exercises import lesson02


def test_a_cleanup_behind_a_flag_is_named_at_its_second_call():
    result = lesson02.q3.evaluate(cleanup_behind_a_flag)
    assert result.mistake == "cleanup_kept", result.message
    # Every rank left the first group, and none the second.
    assert result.fields["ranks"].items == [0, 1, 2]
    assert "call 2 of the answer in one process" in result.message


def test_ranks_left_in_the_group_are_named_on_three_ranks():
    result = lesson02.q3.evaluate(cleanup_on_the_first_two_ranks)
    assert result.mistake == "cleanup_left_some" and result.fields["ranks"].items == [2]
    assert "3 ranks, 1 machine(s)" in result.message
