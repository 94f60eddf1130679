"""Exercises of lesson 02, the process group (`from ddp_helpers.exercises import lesson02`).

One module per exercise, each with its words, reference, judge and Exercise: 2.1 backend,
2.2 setup, 2.3 cleanup; machines holds the pretend machines 2.1 and 2.2 name."""

from __future__ import annotations

from ..kit import progress as _progress
from .backend import q1
from .cleanup import q3
from .setup import q2

EXERCISES = [q1, q2, q3]


def progress() -> None:
    """Which exercises of lesson 02 pass, checked against this notebook's definitions."""
    _progress(EXERCISES, "02")
