"""Exercises of lesson 05, sharding the memory (`from ddp_helpers.exercises import lesson05`).

One module per exercise, each with its words, reference, judge and Exercise: 5.1 zero
(ZeRO-1 by hand), 5.2 fsdp (FSDP2's fully_shard); Going further: 5.3 traffic (the bytes a
step sends), 5.4 checkpoint (save_sharded) and 5.5 resume (load_sharded), whose round trip
is round_trip's. common holds the model and the batches the cells and checks share."""

from __future__ import annotations

import sys

from ...i18n import messages
from ...versions import installed_torch_release
from ..kit import in_order, numbered
from ..kit import progress as _progress
from . import checkpoint, fsdp, resume, traffic, zero
from .common import make_batches as make_batches
from .common import make_model as make_model
from .common import my_rows as my_rows

# This lesson's checks train DDP beside the answer (5.1, 5.2): its notebook's %load_ext and
# the grader's scorer ask the launcher to expect it (launcher.expect_ddp).
BUILDS_DDP = True

# By their ids, the notebook's order: the core path (5.1, 5.2), then Going further (5.3 to 5.5).
EXERCISES = in_order(checkpoint, fsdp, resume, traffic, zero)
globals().update(numbered(EXERCISES))  # ex.q1, ex.q2, ...: each named from its id


def progress() -> None:
    """Which exercises of lesson 05 pass, checked against this notebook's definitions."""
    _progress(EXERCISES, "05")


# The oldest torch this lesson is checked on, where lessons 01-04 go back to 2.8 (pyproject):
# `make compat` ran it with every check correct on 2.12.1, 2.13.0 (the lock's) and 2.15.0;
# on 2.8.0 a right answer to 5.4 and 5.5 fails (its next step after a load on 3 ranks was
# 1e-3 off). 2.9 to 2.11 are not checked: the note below names them older.
OLDEST_TORCH = (2, 12)

MESSAGES = messages(
    "exercises.lesson05",
    {
        "old_torch": (
            "[ddp_helpers] note: lesson 05 is checked on torch {oldest} and later (`make "
            "compat`); this kernel has torch {version}. On an older torch its checks of "
            "sharded checkpoints (5.4, 5.5) can fail a right answer, as they do on torch 2.8, "
            "and some of its sentences about FSDP2 describe newer releases. Lessons 01 to 04 "
            "are checked on torch 2.8 and later."
        ),
    },
)


def _release(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def torch_note(version: str | None) -> str | None:
    """What the lesson says of torch `version` before it starts: None where it is checked
    (or where none is installed: the notebook's first cell, `import torch`, says so)."""
    if version is None or _release(version) >= OLDEST_TORCH:
        return None
    oldest = ".".join(map(str, OLDEST_TORCH))
    return MESSAGES["old_torch"].format(oldest=oldest, version=version)


if (_note := torch_note(installed_torch_release())) is not None:
    print(_note, file=sys.stderr)
