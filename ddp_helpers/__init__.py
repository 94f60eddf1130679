"""DDP Basics helpers: launch code on N ranks from a notebook, check exercises, grade."""

from .launcher import DistributedError, Results, launch, shutdown, spawn, warm_up

__all__ = ["DistributedError", "Results", "launch", "shutdown", "spawn", "warm_up"]


def load_ipython_extension(ipython):
    """`%load_ext ddp_helpers`: registers the `%%ddp` cell magic (every lesson)."""
    from .magic import register

    register(ipython)
