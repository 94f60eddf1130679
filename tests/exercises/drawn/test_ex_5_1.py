"""Exercise 5.1's check, ZeRO-1 by hand (lesson05/zero.py), on its answers
(tests/drawn_answers/ex_5_1.py).

Lesson 05 is not in LESSONS yet, so the holds that iterate the lessons (the sweep of
tests/exercises/test_answers.py, test_spaces.py, test_checks.py) do not reach it: this file
runs each of them on 5.1 directly, with their own helpers. Once LESSONS lists "05" (and
lesson05's EXERCISES holds q1), DRAWN joins the sweep there and those files hold it too.
Beside them: where each mistake showed, what its message says of its answer, and how an
answer that raises, or is still the stub, is shown."""

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
import test_answers  # noqa: E402
import test_checks  # noqa: E402
import test_spaces  # noqa: E402

pytestmark = pytest.mark.usefixtures("no_leftovers")

q1 = lesson05.q1
WRONG, RIGHT = DRAWN["5.1"]


def _nothing():
    return None


@pytest.fixture(scope="module")
def warm():
    """The launcher's helper started and warmed for DDP once, as after a notebook's first
    launch (as test_checks.py's warm_launcher)."""
    from ddp_helpers import launch
    from ddp_helpers.launcher import client

    client.expect_ddp()
    launch(_nothing, nprocs=1)


@pytest.mark.parametrize(("answer", "key"), WRONG, ids=[a.__name__ for a, _ in WRONG])
def test_a_real_mistake_does_not_pass_and_is_named(answer, key, monkeypatch):
    if key == "hang":  # found at the check's hang limit: a shorter one costs the test less
        module = sys.modules[q1._checker.__module__]
        real = module.run_on_ranks
        monkeypatch.setattr(module, "run_on_ranks", lambda *a, **k: real(*a, **{**k, "timeout": 5}))
    result = q1.grade(answer)
    test_answers.assert_named(q1, result, key)
    test_answers.assert_japanese(result)


@pytest.mark.parametrize("answer", RIGHT, ids=[a.__name__ for a in RIGHT])
def test_a_right_answer_written_differently_passes(answer):
    result = q1.grade(answer)  # the grader's hidden cases included
    assert result.status == "correct", str(result)
    test_answers.assert_japanese(result)


def test_the_space_is_declared_by_the_rule_of_each_axis():
    test_spaces.test_each_exercise_declares_every_axis_by_its_rule(q1)


def test_what_the_check_draws_is_seen_drawn(tmp_path):
    test_spaces.test_what_an_exercise_draws_is_seen_drawn(q1, tmp_path)


def test_the_check_stays_within_what_it_declares(warm, monkeypatch):
    test_checks.test_a_check_stays_within_what_its_exercise_declares(q1, monkeypatch)


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
