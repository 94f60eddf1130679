"""1.4 predict_all_gather: what every rank holds after an all_gather."""

from __future__ import annotations

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
from .all_reduce import held, per_rank

MESSAGES = messages(
    "exercises.lesson01.all_gather",
    {
        "hint.gather_all": (
            "all_gather collects one tensor from every rank and gives every rank the whole "
            "collection, in rank order."
        ),
        "hint.gather_each": (
            "Rank r contributes r. Each of the 3 ranks ends with the same list of 3 values."
        ),
        "gather_shape": "Give what each rank holds afterwards: a list of 3 lists, one per rank.",
        "gather_shape.title": "not a list per rank",
        "gather_one": (
            "{got} looks like what one rank ends with, but the question asks what each rank "
            "holds: give a list with one entry per rank."
        ),
        "gather_one.title": "one rank's list, not every rank's",
        "gather_other": (
            "{got} is not it. all_gather collects every rank's tensor, in rank order, and "
            "every rank receives the whole collection."
        ),
        "gather_other.title": "another collection",
        "gather_ok": "Every rank ends with [0, 1, 2].",
    },
)


def predict_all_gather():
    return [[0, 1, 2], [0, 1, 2], [0, 1, 2]]


def _check_gather(fn) -> Phrase:
    got = run_answer(call, fn)
    rows = per_rank(got)
    if rows is not None and [held(v) for v in rows] == [0.0, 1.0, 2.0]:
        raise Wrong("gather_one", got=rows)
    if rows is None or len(rows) != 3:
        raise Wrong("gather_shape")
    values = [per_rank(row) for row in rows]
    if any(row is None for row in values):
        raise Wrong("gather_shape")
    values = [[held(v) for v in row] for row in values]
    if values == [[0.0, 1.0, 2.0]] * 3:
        return Phrase("gather_ok")
    raise Wrong("gather_other", got=rows)


# A prediction of the lesson's own configuration: nothing an answer is given could vary.
SPACE = Space(
    drawn={},
    why_not={
        "world": "a prediction for the lesson's 3 ranks (rank r holding r): the answer "
        "takes no world size, so no other could be asked of it",
        "machines": "where the 3 ranks run changes nothing all_gather leaves",
        "calls": "it takes no input: a second call could only ask the same question",
        "steps": "one all_gather, no loop",
        "counts": "it is given no count: the question fixes 3 ranks, one element each",
        "dtypes": "its values are numbers the learner writes down; the tensors are the "
        "lesson's own",
        "model": "no model: one tensor of one element a rank",
        "lengths": "the lesson's tensors hold one element each; the answer has one list per "
        "rank, one entry per rank in each",
        "device": "it runs no collective and makes no tensor",
    },
)


exercise = Exercise(
    "1.4",
    "predict_all_gather",
    _check_gather,
    predict_all_gather,
    texts=MESSAGES,
    hints=("gather_all", "gather_each"),
    mistakes={
        "gather_shape": Mistake(hint="gather_all"),
        "gather_one": Mistake(hint="gather_all"),
        "gather_other": Mistake(hint="gather_all"),
    },
    space=SPACE,
)
