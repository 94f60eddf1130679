"""1.3 predict_all_reduce: what every rank holds after an all_reduce."""

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
    "exercises.lesson01.all_reduce",
    {
        "hint.reduce_sum": (
            "all_reduce combines the tensors of all ranks (by default it sums them) and "
            "writes the result back into the tensor on every rank, in place."
        ),
        "hint.reduce_before": "Before the call, ranks 0, 1 and 2 hold 1, 2 and 3.",
        "reduce_shape": ("Give one value per rank: a list of 3 numbers (what ranks 0, 1, 2 hold)."),
        "reduce_shape.title": "not one value per rank",
        "reduce_local": (
            "{got} is what each rank held before the call. all_reduce leaves the combined "
            "result on every rank."
        ),
        "reduce_local.title": "what the ranks held before the all_reduce",
        "reduce_other": (
            "{got} is not it. After an all_reduce every rank holds the same value: what all "
            "the ranks held before, summed."
        ),
        "reduce_other.title": "another value",
        "reduce_ok": "Every rank holds 1 + 2 + 3 = 6 after the all_reduce.",
    },
)


def predict_all_reduce():
    return [6, 6, 6]


def _check_reduce(fn) -> Phrase:
    got = run_answer(call, fn)
    if not isinstance(got, (list, tuple)) or len(got) != 3:
        raise Wrong("reduce_shape")
    values = [float(v) for v in got]
    if values == [6.0, 6.0, 6.0]:
        return Phrase("reduce_ok")
    if values == [1.0, 2.0, 3.0]:
        raise Wrong("reduce_local", got=list(got))
    raise Wrong("reduce_other", got=list(got))


q3 = Exercise(
    "1.3",
    "predict_all_reduce",
    _check_reduce,
    predict_all_reduce,
    texts=MESSAGES,
    hints=("reduce_sum", "reduce_before"),
    mistakes={
        "reduce_shape": Mistake(hint="reduce_sum"),
        "reduce_local": Mistake(hint="reduce_sum"),
        "reduce_other": Mistake(hint="reduce_sum"),
    },
)
