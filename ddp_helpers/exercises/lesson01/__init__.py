"""Exercises of lesson 01, rank and world size (`from ddp_helpers.exercises import lesson01`).

One module per exercise, each with its words, reference, judge and Exercise: 1.1 gpu,
1.2 shard, 1.3 all_reduce, 1.4 all_gather; this module, the words the cells say."""

from __future__ import annotations

from ...i18n import messages
from ..kit import in_order, numbered, sayer
from ..kit import progress as _progress
from . import all_gather, all_reduce, gpu, shard

MESSAGES = messages(
    "exercises.lesson01",
    {
        # The GIL cell's timings (Going further), printed beside its finding.
        "gil_serial": "one after another: {seconds:.2f} s (measured)",
        "gil_threads": (
            "two threads:       {seconds:.2f} s (measured), cores busy: {cores:.2f} (measured)"
        ),
        "gil_processes": "two processes:     {seconds:.2f} s (measured)",
        "finding.gil": (
            "Finding: together the two threads used at most about one core's worth of CPU "
            "time, where threads running at once would use two: the GIL let one thread at a "
            "time run Python."
        ),
        "finding.no_gil": (
            "Finding: the two threads used more than one core at once, which the GIL does "
            "not allow (is this a free-threaded Python build?)."
        ),
    },
)
say = sayer(MESSAGES)

EXERCISES = in_order(all_gather, all_reduce, gpu, shard)  # by their ids
globals().update(numbered(EXERCISES))  # ex.q1, ex.q2, ...: each named from its id


def progress() -> None:
    """Which exercises of lesson 01 pass, checked against this notebook's definitions."""
    _progress(EXERCISES, "01")
