"""Exercise 5.3's check (the answers in tests/drawn_answers/ex_5_3.py): each wrong prediction is
named by its mistake, in both languages, and right ones written other ways pass, the grader's
cases included. Lesson 05 is not yet in LESSONS, so the sweep (tests/exercises/test_answers.py)
and the spaces' holds (tests/exercises/test_spaces.py) do not reach 5.3 yet: this file runs
them on it."""

from __future__ import annotations

from drawn_answers.ex_5_3 import DRAWN
from ja_guard import english_in_japanese

from ddp_helpers import i18n
from ddp_helpers.exercises import lesson05
from ddp_helpers.exercises.lesson05 import traffic

WRONG, RIGHT = DRAWN["5.3"]
EX = lesson05.q3


def _name(value):
    return getattr(value, "__name__", value)


def _no_english_in_japanese(result) -> None:
    with i18n.using("ja"):
        shown = [result.message, result.hint or "", result.title or ""]
    problems = [line for text in shown for line in text.splitlines() if english_in_japanese(line)]
    assert problems == [], problems


def test_every_mistake_is_made_by_some_answer_and_the_reference_passes():
    assert {key for _, key in WRONG} == set(EX.mistakes)
    result = EX.evaluate(EX.reference)  # how quickly: `make bench-checks`
    assert result.passed, str(result)
    assert EX._run(EX._hidden, EX.reference).passed
    assert "4,000,000 and 6,000,000 bytes for 1,000,000 parameters on 2 ranks" in result.message


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
