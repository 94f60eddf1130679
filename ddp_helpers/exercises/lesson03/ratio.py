"""3.3 predict_summed_loss_ratio (Going further): what a summed loss does to the gradients."""

from __future__ import annotations

import fractions

from ...i18n import messages
from ...launcher.plain import shown
from ..kit import (
    Exercise,
    Mistake,
    Phrase,
    Wrong,
    call,
    run_answer,
)
from ..lesson01.all_reduce import held
from ..space import Space

MESSAGES = messages(
    "exercises.lesson03.ratio",
    {
        "hint.ratio_average": (
            "DDP averages the ranks' gradients. With a summed loss each rank's gradient is "
            "the sum over its own rows only."
        ),
        "hint.ratio_sums": (
            "One process, summed loss over all B rows: gradient G. Two ranks, each summing "
            "over B/2 rows, averaged by DDP: (G1 + G2) / 2 = G / 2."
        ),
        "ratio_inverse": (
            "The other way round: DDP averages the ranks' gradients, dividing by the number "
            "of ranks, so its update is smaller."
        ),
        "ratio_inverse.title": "the inverse ratio",
        "ratio_other": (
            "{got} is not it. With a summed loss, each rank's gradient sums over its own "
            "rows; what does DDP then do with the ranks' gradients, and how does that "
            "compare with one process summing over all rows?"
        ),
        "ratio_other.title": "another ratio",
        "ratio_shape": (
            "{got} is not a number. Give one number: DDP's update size divided by one process's."
        ),
        "ratio_shape.title": "not one number",
        "ratio_ok": "DDP's update is 1 / world_size = 0.5 of the single-process one.",
    },
)


def predict_summed_loss_ratio():
    return 0.5


def _as_number(answer) -> float | None:
    """The answer as a number: a number, a list or tensor of one, or text such as "1/2"."""
    if isinstance(answer, str):
        try:
            return float(fractions.Fraction(answer.strip()))
        except (ValueError, ZeroDivisionError):
            return None
    return held(answer)


def _check_ratio(fn) -> Phrase:
    answer = run_answer(call, fn)
    got = _as_number(answer)
    if got is None:
        raise Wrong("ratio_shape", got=shown(answer))
    if abs(got - 0.5) < 1e-6:
        return Phrase("ratio_ok")
    if abs(got - 2.0) < 1e-6:
        raise Wrong("ratio_inverse")
    raise Wrong("ratio_other", got=got)


# A prediction of the lesson's own configuration: nothing an answer is given could vary.
SPACE = Space(
    drawn={},
    why_not={
        "world": "a prediction for the lesson's 2 ranks: the answer takes no world size, so "
        "no other could be asked of it",
        "machines": "where the 2 ranks run changes nothing DDP averages",
        "calls": "it takes no input: a second call could only ask the same question",
        "steps": "one SGD step, from the same weights",
        "counts": "it is given no count: the question fixes B rows and 2 ranks",
        "dtypes": "the answer is one number the learner writes down",
        "model": "no model is handed to it: the question is about any model",
        "lengths": "it is given no data",
        "device": "it runs nothing and makes no tensor",
    },
)


exercise = Exercise(
    "3.3",
    "predict_summed_loss_ratio",
    _check_ratio,
    predict_summed_loss_ratio,
    texts=MESSAGES,
    hints=("ratio_average", "ratio_sums"),
    mistakes={
        "ratio_inverse": Mistake(hint="ratio_average"),
        "ratio_other": Mistake(hint="ratio_average"),
        "ratio_shape": Mistake(hint="ratio_average"),
    },
    space=SPACE,
)
