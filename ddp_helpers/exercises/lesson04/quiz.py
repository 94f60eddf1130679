"""4.3 quiz_answers (Going further): what DDP keeps the same on every rank, and when."""

from __future__ import annotations

import re

from ...i18n import messages
from ..kit import (
    Exercise,
    Mistake,
    Phrase,
    Wrong,
    call,
    run_answer,
)
from ..space import Space

MESSAGES = messages(
    "exercises.lesson04.quiz",
    {
        "hint.quiz_reread": (
            "Reread where each of these was shown: in lesson 03's core path, the weights "
            "before and after DDP(...) and one weight's gradient on two ranks after "
            "backward(); above, how the sampler draws each epoch's order (seed + epoch); and "
            "why the copies stay identical."
        ),
        "quiz_shape": "Return a dict with the answers to questions 1-{n}, each 'a', 'b' or 'c'.",
        "quiz_shape.title": "not a dict of answers",
        "quiz_wrong": "Question {q} is not right yet. {why}",
        "quiz_wrong.title": "a wrong answer",
        # What each question is about, to think it through again; never which letter is right.
        "quiz_why_1": (
            "Think about what DDP does when it is built, before any training step, so that "
            "training can start from one model on every rank."
        ),
        "quiz_why_2": (
            "Think about which call of a training step DDP's hooks run in: the gradients "
            "are averaged as soon as they exist."
        ),
        "quiz_why_3": (
            "Think about what the sampler needs from you to shuffle differently each epoch "
            "while every rank still agrees on the shuffle."
        ),
        "quiz_why_4": "Think about how the ranks' copies of the model compare after each step.",
        "quiz_ok": "All {n} answers right.",
    },
)


# A quiz is a value: four letters for the four questions the notebook prints. Nothing an
# answer is given could be drawn otherwise.
SPACE = Space(
    drawn={},
    why_not={
        "world": "quiz_answers() runs on no process group: its letters hold on any world size",
        "machines": "it runs on no machine's ranks: the letters are the same on every one",
        "calls": "it takes no input: each call returns the same four letters, with nothing "
        "to vary between two calls",
        "steps": "it has no loop and no state: one dict, returned",
        "counts": "it is given no count; the four questions are the notebook's text",
        "dtypes": "its values are letters, not tensors",
        "model": "it takes no model",
        "lengths": "its dict has one entry per question of the notebook, four, which the "
        "prompt fixes",
        "device": "it makes no tensor",
    },
)

# Question number -> the right letter (the questions are in lesson 04's notebook).
QUIZ = {1: "b", 2: "a", 3: "c", 4: "a"}


def quiz_answers():
    return {1: "b", 2: "a", 3: "c", 4: "a"}


def _letter(answer) -> str:
    """'b' for 'b', 'B', 'b)', '(b)' or 'b.': an answer in the form the prompt prints it."""
    text = str(answer).strip().lower()
    found = re.fullmatch(r"\(?([a-z])[).:]?", text)
    return found.group(1) if found else text


def _check_quiz(fn) -> Phrase:
    got = run_answer(call, fn)
    if not isinstance(got, dict):
        raise Wrong("quiz_shape", n=len(QUIZ))
    for q, right in QUIZ.items():
        answer = _letter(got.get(q, got.get(str(q), "")))
        if answer != right:
            raise Wrong("quiz_wrong", q=q, why=Phrase(f"quiz_why_{q}"))
    return Phrase("quiz_ok", n=len(QUIZ))


exercise = Exercise(
    "4.3",
    "quiz_answers",
    _check_quiz,
    quiz_answers,
    texts=MESSAGES,
    hints=("quiz_reread",),
    mistakes={
        "quiz_shape": Mistake(hint="quiz_reread"),
        "quiz_wrong": Mistake(hint="quiz_reread"),
    },
    further=True,
    space=SPACE,
)
