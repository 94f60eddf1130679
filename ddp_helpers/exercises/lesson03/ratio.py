"""3.3 predict_summed_loss_ratio (Going further): what a summed loss does to the gradients."""

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
        "ratio_ok": "DDP's update is 1 / world_size = 0.5 of the single-process one.",
    },
)


def predict_summed_loss_ratio():
    return 0.5


def _check_ratio(fn) -> Phrase:
    got = float(run_answer(call, fn))
    if abs(got - 0.5) < 1e-6:
        return Phrase("ratio_ok")
    if abs(got - 2.0) < 1e-6:
        raise Wrong("ratio_inverse")
    raise Wrong("ratio_other", got=got)


q3 = Exercise(
    "3.3",
    "predict_summed_loss_ratio",
    _check_ratio,
    predict_summed_loss_ratio,
    texts=MESSAGES,
    hints=("ratio_average", "ratio_sums"),
    mistakes={
        "ratio_inverse": Mistake(hint="ratio_average"),
        "ratio_other": Mistake(hint="ratio_average"),
    },
)
