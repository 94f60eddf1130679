"""Exercise 5.2's check (the answers in tests/drawn_answers/ex_5_2.py): each wrong prediction is
named by its mistake, in both languages, and right ones written other ways pass, the grader's
cases included. Lesson 05 is not yet in LESSONS, so the sweep (tests/exercises/test_answers.py)
and the spaces' holds (tests/exercises/test_spaces.py) do not reach 5.2 yet: this file runs
them on it."""

from __future__ import annotations

import time

import pytest
from drawn_answers.ex_5_2 import DRAWN
from ja_guard import english_in_japanese

from ddp_helpers import i18n
from ddp_helpers.exercises import lesson05
from ddp_helpers.exercises.lesson05 import traffic

pytestmark = pytest.mark.usefixtures("no_leftovers")

WRONG, RIGHT = DRAWN["5.2"]
EX = lesson05.q2


def _name(value):
    return getattr(value, "__name__", value)


def _no_english_in_japanese(result) -> None:
    with i18n.using("ja"):
        shown = [result.message, result.hint or "", result.title or ""]
    problems = [line for text in shown for line in text.splitlines() if english_in_japanese(line)]
    assert problems == [], problems


@pytest.mark.parametrize(("answer", "key"), WRONG, ids=_name)
def test_a_wrong_prediction_is_named_by_its_mistake(answer, key):
    result = EX.grade(answer)
    assert (result.status, result.mistake) == ("wrong", key), str(result)
    shown = str(result)
    assert EX.texts.text(key, **result.fields) in shown
    title = EX.texts.template(f"{key}.title")
    assert title.strip() and not i18n.fields(title) and result.title == title
    assert result.hint_name == EX.mistakes[key].hint
    if result.hint_name is not None:
        assert result.hint == EX.hints[result.hint_name] and result.hint in shown
    assert result.hint != list(EX.hints.values())[-1]  # the last hint gives the formula
    # Nor does the feedback: it shows the answer's own numbers, the case, the notebook's.
    assert set(result.fields) <= {"got", "ddp", "fsdp", "params", "world", "notebook"}
    for part in {"ddp", "fsdp"} & set(result.fields):
        assert result.fields[part] == result.fields["got"][part]
    _no_english_in_japanese(result)


@pytest.mark.parametrize("answer", RIGHT, ids=_name)
def test_a_right_prediction_written_another_way_passes(answer):
    result = EX.grade(answer)  # the grader's cases too
    assert result.status == "correct", str(result)
    _no_english_in_japanese(result)


def test_every_mistake_is_made_by_some_answer_and_the_reference_passes_quickly():
    assert {key for _, key in WRONG} == set(EX.mistakes)
    started = time.monotonic()
    result = EX.evaluate(EX.reference)
    assert result.passed, str(result)
    assert EX._run(EX._hidden, EX.reference).passed
    assert time.monotonic() - started <= EX.run_time / 5
    assert "4,000,000 and 6,000,000 bytes for 1,000,000 parameters on 2 ranks" in result.message


def test_its_space_follows_the_rules_and_what_it_declares_is_seen_drawn(tmp_path):
    import exercises.test_spaces as spaces

    spaces.test_each_exercise_declares_every_axis_by_its_rule(EX)
    spaces.test_what_an_exercise_draws_is_seen_drawn(EX, tmp_path)


def test_the_notebooks_counts_are_the_models_and_never_drawn():
    from ddp_helpers.demos import sharding
    from ddp_helpers.exercises.lesson05.common import make_model

    demo = sharding.parameter_count()
    params = list(make_model().parameters())
    lesson = (sum(p.numel() for p in params if p.requires_grad), sum(p.numel() for p in params))
    assert traffic.NOTEBOOK_PARAMS == (demo["trainable"], demo["parameters"], *lesson)
    for seed in traffic.WORLDS:
        drawn = traffic._cases(seed)
        assert not {p for p, _ in drawn} & set(traffic.NOTEBOOK_PARAMS)
        assert 3 in {w for _, w in drawn}
