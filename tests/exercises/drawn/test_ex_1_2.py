"""Exercise 1.2's check against answers that keep what a first call built or hold only a few
items (issue 49; the answers in tests/drawn_answers/ex_1_2.py, also in the sweep)."""

from __future__ import annotations

from drawn_answers.ex_1_2 import shard_padding_built_once, shard_with_room_for_twenty

from ddp_helpers.exercises import lesson01
from ddp_helpers.exercises.lesson01 import shard


def test_a_share_built_once_is_named_with_both_answers_it_gave():
    result = lesson01.q2.evaluate(shard_padding_built_once)
    assert result.mistake == "shard_kept", result.message
    f = result.fields
    # The first case, 11 items on 3 ranks: right where it came first, not where it came last.
    assert (f["n"], f["rank"], f["w"]) == (11, 0, 3)
    assert f["other"] == f["want"] == [0, 3, 6, 9] and f["got"] != f["want"]


def test_a_fixed_capacity_fails_on_a_share_past_it():
    result = lesson01.q2.evaluate(shard_with_room_for_twenty)
    assert result.mistake == "shard_length" and result.fields["count"] == 20


def test_the_notebooks_own_count_is_never_drawn_and_one_rank_is_no_block():
    for seed in (0, 1, 2):
        assert all(n != shard.NOTEBOOK_N for n, _ in shard._grid(seed))
    # On 1 rank every share is consecutive: an answer short of items there is told its
    # length, not that it cut blocks (above, 20 items of 34 on 1 rank).
    assert lesson01.q2.evaluate(shard_with_room_for_twenty).fields["w"] == 1
