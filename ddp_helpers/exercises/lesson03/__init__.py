"""Exercises of lesson 03, wrapping the model (`from ddp_helpers.exercises import lesson03`).

One module per exercise, each with its words, reference, judge and Exercise: 3.1 wrap,
3.2 average, 3.3 ratio, 3.4 accumulate, 3.5 traffic; 3.6 mini_ddp (MiniDDP, DDP by hand).
common holds what the cells and several checks share; this module, the words the cells say."""

from __future__ import annotations

from ...i18n import messages
from ..kit import in_order, numbered, sayer
from ..kit import progress as _progress
from . import accumulate, average, mini_ddp, ratio, traffic, wrap
from .common import make_batches as make_batches
from .common import make_model as make_model
from .common import setup as setup
from .mini_ddp import buckets_for as buckets_for  # exercise 3.6 lays out its buckets with it
from .mini_ddp import mini_ddp_timeline as mini_ddp_timeline

# This lesson's cells and checks wrap models in DDP: its notebook's %load_ext and the grader's
# scorer ask the launcher to expect it (launcher.expect_ddp); importing it changes nothing.
BUILDS_DDP = True

# What the lesson's cells say (ex.say), not an exercise's words.
MESSAGES = messages(
    "exercises.lesson03",
    {
        "speedup": "{name}: speed-up on 2 ranks {speedup:.2f} (measured), limit 2",
        # What communication costs (Going further): the fit, then a DDP step predicted.
        "cores_line": "cores on this machine: {cores} (measured)",
        "fit_line": (
            "{n} ranks: latency a step, µs: {alpha:.0f} (fitted); "
            "bandwidth, GB/s: {beta:.2f} (fitted)"
        ),
        "buckets_line": "buckets: {count}, {mib:.1f} MiB",
        "predicted_line": "the ring model's prediction for them, ms: {ms:.1f} (predicted)",
        "alone_line": "each bucket's all_reduce timed alone, summed, ms: {ms:.1f} (measured)",
        "span_line": "span of a step's all-reduces, backward included, ms: {ms:.1f} (measured)",
    },
)
say = sayer(MESSAGES)

EXERCISES = in_order(accumulate, average, mini_ddp, ratio, traffic, wrap)  # by their ids
globals().update(numbered(EXERCISES))  # ex.q1, ex.q2, ...: each named from its id


def progress() -> None:
    """Which exercises of lesson 03 pass, checked against this notebook's definitions."""
    _progress(EXERCISES, "03")
