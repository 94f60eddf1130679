"""Run a function or a notebook cell on N ranks, one process each (every lesson)."""

from .api import Results, SpawnContext, launch, run_cell, spawn
from .client import expect_ddp, shutdown, warm_up
from .failures import DistributedError, RankFailure

__all__ = [
    "DistributedError",
    "RankFailure",
    "Results",
    "SpawnContext",
    "expect_ddp",
    "launch",
    "run_cell",
    "shutdown",
    "spawn",
    "warm_up",
]
