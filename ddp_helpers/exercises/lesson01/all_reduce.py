"""1.3 predict_all_reduce: what every rank holds after an all_reduce."""

from __future__ import annotations

from ...i18n import messages
from ..kit import (
    Exercise,
    Mistake,
    Phrase,
    Wrong,
    call,
    is_tensor,
    run_answer,
)
from ..space import Space

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


def held(value) -> float | None:
    """What a rank holds, as a number: a number, or a list or tensor of one (the lesson's
    tensors hold one element each); None for anything else."""
    if is_tensor(value):
        value = value.tolist()  # a number for a 0-d tensor, else a list
    if isinstance(value, (list, tuple)) and len(value) == 1:
        value = value[0]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def per_rank(value) -> list | None:
    """One entry per rank, from a list, a tuple or a tensor; None for anything else."""
    if is_tensor(value):
        value = value.tolist() if value.dim() > 0 else None
    return list(value) if isinstance(value, (list, tuple)) else None


def _check_reduce(fn) -> Phrase:
    got = run_answer(call, fn)
    ranks = per_rank(got)
    values = None if ranks is None or len(ranks) != 3 else [held(v) for v in ranks]
    if values is None or None in values:
        raise Wrong("reduce_shape")
    if values == [6.0, 6.0, 6.0]:
        return Phrase("reduce_ok")
    if values == [1.0, 2.0, 3.0]:
        raise Wrong("reduce_local", got=ranks)
    raise Wrong("reduce_other", got=ranks)


# A prediction of the lesson's own configuration: nothing an answer is given could vary.
SPACE = Space(
    drawn={},
    why_not={
        "world": "a prediction for the lesson's 3 ranks (rank r holding r + 1): the answer "
        "takes no world size, so no other could be asked of it",
        "machines": "where the 3 ranks run changes nothing all_reduce leaves",
        "calls": "it takes no input: a second call could only ask the same question",
        "steps": "one all_reduce, no loop",
        "counts": "it is given no count: the question fixes 3 ranks, one element each",
        "dtypes": "its values are numbers the learner writes down; the tensors are the "
        "lesson's own",
        "model": "no model: one tensor of one element a rank",
        "lengths": "the lesson's tensors hold one element each; the answer has one per rank",
        "device": "it runs no collective and makes no tensor",
    },
)


exercise = Exercise(
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
    space=SPACE,
)
