"""Exercises of lesson 02, the process group (`from ddp_helpers.exercises import lesson02`).

One module per exercise, each with its words, reference, judge and Exercise: 2.1 backend,
2.2 setup, 2.3 cleanup; machines holds the pretend machines 2.1 and 2.2 name."""

from __future__ import annotations

from ..kit import in_order, numbered
from ..kit import progress as _progress
from . import backend, cleanup, setup

EXERCISES = in_order(backend, cleanup, setup)  # by their ids
globals().update(numbered(EXERCISES))  # ex.q1, ex.q2, ...: each named from its id


def progress() -> None:
    """Which exercises of lesson 02 pass, checked against this notebook's definitions."""
    _progress(EXERCISES, "02")
