"""Exercises of lesson 05, sharding the memory (`from ddp_helpers.exercises import lesson05`).

One module per exercise, each with its words, reference, judge and Exercise: 5.1 zero
(ZeRO-1 by hand), 5.2 fsdp (FSDP2's fully_shard); Going further: 5.3 traffic (the bytes a
step sends), 5.4 checkpoint (save_sharded) and 5.5 resume (load_sharded), whose round trip
is round_trip's. common holds the model and the batches the cells and checks share."""

from __future__ import annotations

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
