"""Exercise 3.5's check against answers that hold for powers of two only (issue 49; the answers
in tests/drawn_answers/ex_3_5.py, also in the sweep)."""

from __future__ import annotations

import pytest
from drawn_answers.ex_3_5 import (
    bytes_by_halving_and_doubling,
    bytes_from_a_table_of_fractions,
    bytes_from_a_table_without_a_default,
)

from ddp_helpers.exercises import lesson03
from ddp_helpers.exercises.lesson03 import traffic


@pytest.mark.parametrize("answer", [bytes_by_halving_and_doubling, bytes_from_a_table_of_fractions])
def test_a_formula_right_for_powers_of_two_only_is_named_with_them(answer):
    result = lesson03.q5.evaluate(answer)
    assert result.mistake == "bytes_powers_of_two", result.message
    assert "on 3 ranks, though it is right on 2, 4 and 8 ranks" in result.message
    # True of the answer: right on every power of two the check drew, wrong on 3 ranks.
    for params, world in traffic._cases(0):
        if world > 1 and world & (world - 1) == 0:
            assert traffic._right(answer(params, world), params, world)
    assert not traffic._right(answer(1_000_000, 3), 1_000_000, 3)


def test_a_table_of_powers_of_two_fails_where_it_has_no_entry():
    result = lesson03.q5.evaluate(bytes_from_a_table_without_a_default)
    assert (result.status, result.title) == ("error", "raised KeyError"), result.message


def test_every_seed_draws_powers_of_two_and_others():
    for seed in traffic.WORLDS:
        worlds = {w for _, w in traffic._cases(seed)}
        assert {w for w in worlds if w & (w - 1)} and {
            w for w in worlds if w > 1 and not w & (w - 1)
        }
        assert traffic.NOTEBOOK_PARAMS not in {p for p, _ in traffic._cases(seed)}
