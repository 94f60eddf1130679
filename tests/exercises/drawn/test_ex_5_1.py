"""Exercise 5.1's check, ZeRO-1 by hand (lesson05/zero.py), on its answers
(tests/drawn_answers/ex_5_1.py).

The sweep of tests/exercises/test_answers.py (with DRAWN) and test_spaces.py hold 5.1
as every exercise; this file holds what is its own: where each
mistake showed, what its message says of its answer, and how an answer that raises, or is
still the stub, is shown."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from drawn_answers.ex_5_1 import (
    DRAWN,
    ShardedAveragingAgain,
    ShardedByLocalRank,
    ShardedDividingAgainUnderAdamW,
    ShardedForTwoRanks,
    ShardedWhoseStepRaises,
    ShardedWithoutBroadcast,
)

from ddp_helpers.exercises import lesson05

# tests/exercises, whose holds this file runs on 5.1: by the names pytest gives them there (a
# rank finds them by the same path, which each launch sends).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


q1 = lesson05.q1
WRONG, RIGHT = DRAWN["5.1"]


def _nothing():
    return None


@pytest.fixture(scope="module")
def warm():
    """The launcher's helper started and warmed for DDP once, as after a notebook's first
    launch."""
    from ddp_helpers import launch
    from ddp_helpers.launcher import client

    client.expect_ddp()
    launch(_nothing, nprocs=1)


# ---------------------------------------------------------------- where, and what it says


@pytest.mark.parametrize(
    ("answer", "key", "tried"),
    [
        (ShardedForTwoRanks, "zero_world", {"ranks": 3}),
        (ShardedByLocalRank, "zero_local", {"ranks": 2, "machines": 2}),
        (ShardedWithoutBroadcast, "zero_not_shared", {"ranks": 3, "step": 1}),
        (ShardedDividingAgainUnderAdamW, "zero_divided", {"optimizer": "AdamW", "step": 1}),
    ],
    ids=["two ranks", "local rank", "no broadcast", "divided under AdamW"],
)
def test_each_mistake_is_named_where_it_showed(answer, key, tried):
    result = q1.evaluate(answer)
    assert result.mistake == key, result.message
    assert tried.items() <= result.tried.items(), result.tried


def test_gradients_averaged_again_are_named_by_what_step_reduced():
    # On 2 ranks a second average changes nothing (x + x is exact, and so is / 2): only the
    # all_reduce of the gradients in step() shows it, every one of them.
    result = q1.evaluate(ShardedAveragingAgain)
    assert result.mistake == "zero_twice" and result.fields["collective"] == "all_reduce"
    model = _trainable_count(result.tried)
    assert result.fields["count"] == model


def _trainable_count(tried: dict) -> int:
    """How many trainable parameters the check's model of that call has (embed's two, a
    weight and a bias a block, the head's weight)."""
    from ddp_helpers.exercises.lesson05.zero import _draws
    from ddp_helpers.exercises.space import CHECK_SEED

    runs = [cases for ranks, machines, _, cases in _draws(CHECK_SEED) if ranks == tried["ranks"]]
    return 2 + 2 * runs[0][tried["call"] - 1]["depth"] + 1


def test_the_verdict_gives_the_state_each_rank_held():
    result = q1.evaluate(q1.reference)
    assert result.passed, result.message
    assert "ranks 0, 1 and 2 held" in result.message
    assert "where DDP's optimizer holds" in result.message


def test_an_answer_that_raises_is_shown_as_its_own_error_with_its_line():
    result = q1.evaluate(ShardedWhoseStepRaises)
    assert (result.status, result.mistake) == ("error", "error"), str(result)
    assert result.title == "raised RuntimeError"
    assert "the learner's own bug" in result.message and "in step" in result.message


def test_the_stub_is_not_attempted():
    class ShardedOptimizer:
        def __init__(self, params, make_optimizer):
            raise NotImplementedError("exercise 5.1")

    result = q1.evaluate(ShardedOptimizer)
    assert (result.status, result.mistake) == ("not_attempted", "not_attempted")
