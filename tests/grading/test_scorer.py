"""The scorer (grading/scorer.py): the checks it uses, and the scorer run alone."""

from __future__ import annotations

import os
import pickle
import time

import cloudpickle

from ddp_helpers.exercises import lesson01, lesson02
from ddp_helpers.grading import (
    scorer,
)
from ddp_helpers.procs import with_this_package

# ---------------------------------------------------------------- the checks it uses


def test_hidden_cases_catch_what_the_visible_check_misses():
    def shard(n, rank, world_size):  # right for the world sizes the check shows, only
        return lesson01.shard(n, rank, world_size) if world_size <= 5 else [rank]

    assert lesson01.q2.evaluate(shard).passed
    result = lesson01.q2.grade(shard)
    assert result.status == "wrong" and "grader's extra cases" in result.message
    assert lesson01.q2.grade(lesson01.shard).passed


def test_an_answer_equal_to_everything_is_not_right():
    class Anything:
        def __eq__(self, other):
            return True

        def __ne__(self, other):
            return False

    assert lesson02.q1.grade(lambda: Anything()).status == "wrong"


def test_the_reference_wrapped_in_a_partial_is_still_the_reference():
    import functools

    assert scorer.from_course(functools.partial(lesson01.shard)) == "ddp_helpers.exercises.lesson01"
    assert scorer.from_course(functools.wraps(lesson01.shard)(lambda *a: 0)) is not None
    assert scorer.from_course(lambda n, rank, world_size: [rank]) is None


# ---------------------------------------------------------------- the scorer alone


def _answers(tmp_path, **answers) -> str:
    path = tmp_path / "answers.pkl"
    path.write_bytes(pickle.dumps({k: ("ok", cloudpickle.dumps(v)) for k, v in answers.items()}))
    for sub in ("tmp", "score"):
        (tmp_path / sub).mkdir(exist_ok=True)
    return str(path)


def _score(tmp_path, path, limit):
    env = with_this_package(dict(os.environ, TMPDIR=str(tmp_path / "tmp")))
    scores, events = scorer.score(path, "01", str(tmp_path), env, limit)
    return {s.id: s for s in scores}, events


def test_an_answer_that_hangs_the_check_is_stopped_and_the_rest_still_scored(tmp_path):
    def shard(n, rank, world_size):
        while True:
            pass

    path = _answers(tmp_path, shard=shard, predict_all_reduce=lambda: [6, 6, 6])
    scores, events = _score(tmp_path, path, limit=1.5)
    assert (
        scores["1.2"].status == "error" and "did not finish within 1.5 s" in scores["1.2"].message
    )
    assert scores["1.2"].mistake == "check_timeout" and scores["1.4"].mistake == "missing"
    assert scores["1.3"].status == "correct"
    assert scores["1.4"].status == "missing"
    assert [e.kind for e in events] == ["check_timeout"]


def test_an_answer_that_kills_the_scorer_costs_only_itself(tmp_path):
    def predict_all_reduce():
        os._exit(9)

    path = _answers(
        tmp_path, predict_all_reduce=predict_all_reduce, predict_all_gather=lambda: [[0, 1, 2]] * 3
    )
    scores, events = _score(tmp_path, path, limit=30)
    assert scores["1.3"].status == "error"
    assert scores["1.3"].message == scorer.MESSAGES["check_died"].format(how="exit code 9")
    assert scores["1.3"].mistake == "check_died" and scores["1.4"].mistake is None
    assert scores["1.4"].status == "correct" and scores["1.2"].status == "missing"
    assert [e.kind for e in events] == ["check_died"]


def test_an_answer_that_forks_cannot_hold_the_scorer(tmp_path):
    def predict_all_reduce():
        if os.fork() == 0:  # a child that keeps the result pipe open
            time.sleep(60)
            os._exit(0)
        return [6, 6, 6]

    path = _answers(tmp_path, predict_all_reduce=predict_all_reduce)
    started = time.monotonic()
    scores, events = _score(tmp_path, path, limit=20)
    assert time.monotonic() - started < 15
    assert scores["1.3"].status == "correct" and not events
