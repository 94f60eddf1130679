"""1.4 predict_all_gather: what every rank holds after an all_gather."""

from __future__ import annotations

from ...i18n import messages
from .._core import (
    Exercise,
    Mistake,
    Phrase,
    Wrong,
    call,
    run_answer,
)

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
    if isinstance(got, (list, tuple)) and [*got] in ([0, 1, 2], [0.0, 1.0, 2.0]):
        raise Wrong("gather_one", got=list(got))
    if not isinstance(got, (list, tuple)) or len(got) != 3:
        raise Wrong("gather_shape")
    try:
        values = [[float(v) for v in row] for row in got]
    except TypeError:
        raise Wrong("gather_shape") from None
    if values == [[0.0, 1.0, 2.0]] * 3:
        return Phrase("gather_ok")
    raise Wrong("gather_other", got=list(got))


q4 = Exercise(
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
)
