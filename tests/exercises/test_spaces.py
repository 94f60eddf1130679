"""Every check draws from the space its exercise declares (exercises/space.py, issue 49).

Two holds on each exercise, core and Going further: its declaration follows the rule of
each axis (world sizes with 3 among them, 1 and 2 machines, two calls at least, counts
that are not the notebook's, ...), or says why the axis does not apply; and what it
declares drawn is seen drawn, by an answer that is the reference and writes down each call
it gets (the process, its world and machines, the dtypes, sizes and model it was handed),
in the learner's check and in the grader's extra cases: here for the exercises the answer
sweep does not cover, in test_answers.py on each swept one's graded right answer.
"""

from __future__ import annotations

import pytest
from space_watch import assert_drawn_seen, launches_watched, watching
from test_answers import SWEEP

from ddp_helpers.exercises import LESSONS, exercises_of
from ddp_helpers.exercises.space import AXES, Space

EXERCISES = [ex for lesson in LESSONS for ex in exercises_of(lesson)]
ids = [ex.id for ex in EXERCISES]


def _rule_broken(space: Space, axis: str) -> str | None:
    """Why a drawn axis breaks its rule (AXES), or None."""
    values = space.drawn[axis]
    if axis == "world" and (3 not in values or len(set(values)) < 2):
        return f"world sizes {values}: 3 among them, and another"
    if axis == "machines" and not {1, 2} <= set(values):
        return f"machines {values}: 1 and 2"
    if axis in ("calls", "steps") and max(values) < 2:
        return f"{axis} {values}: at least 2"
    if axis == "counts":
        for name, drawn in values.items():
            if len(set(drawn)) < 2:
                return f"count {name}: {drawn}: several values"
            if space.notebook.get(name) in drawn:
                return f"count {name}: {drawn} holds the notebook's own {space.notebook[name]}"
        if set(space.notebook) - set(values):
            return f"the notebook's counts {sorted(space.notebook)} are not all drawn"
    if axis == "dtypes" and not {"float64", "int64"} & set(values):
        return f"dtypes {values}: float64 or large int64 among them"
    if axis == "model" and not {"frozen", "buffer"} <= set(values):
        return f"model {values}: a frozen parameter and a buffer"
    if axis == "lengths" and (max(values) <= 8 or len(set(values)) < 2):
        return f"lengths {values}: several, and one past 8"
    return None


@pytest.mark.parametrize("ex", EXERCISES, ids=ids)
def test_each_exercise_declares_every_axis_by_its_rule(ex):
    assert isinstance(ex.space, Space), f"exercise {ex.id} declares no space"
    assert set(ex.space.drawn) | set(ex.space.why_not) == set(AXES)
    broken = {axis: _rule_broken(ex.space, axis) for axis in ex.space.drawn}
    assert not {k: v for k, v in broken.items() if v}, broken


def test_every_exercises_reference_is_a_function_the_next_test_can_watch():
    assert [e.id for e in EXERCISES if not callable(e.reference)] == []


def test_every_exercise_is_seen_drawn_here_or_by_its_graded_right_answer():
    assert {e.id for e in UNSWEPT} | set(SWEEP) == {e.id for e in EXERCISES}


# The swept exercises are seen drawn in test_answers.py, on their graded right answer.
UNSWEPT = [e for e in EXERCISES if callable(e.reference) and e.id not in SWEEP]


@pytest.mark.parametrize("ex", UNSWEPT, ids=lambda e: e.id)
def test_what_an_exercise_draws_is_seen_drawn(ex, tmp_path, monkeypatch):
    log = str(tmp_path / "calls.jsonl")
    answer = watching(ex.reference, log, ex.space.world_from)
    with launches_watched(monkeypatch) as launches:
        result = ex.evaluate(answer)
        assert result.passed, result.message
        if ex._hidden is not None:
            assert ex._run(ex._hidden, answer).passed
    assert_drawn_seen(ex, log, launches)
