"""What check harnesses share on their ranks: a process group, state dicts compared, a
folder per rank and who wrote in it."""

from __future__ import annotations

import contextlib
import math
import os
import tempfile

from ..files import remove_tree


@contextlib.contextmanager
def process_group(**kwargs):
    """A check harness's gloo process group on this rank: created, then destroyed whatever
    happens, unless the answer destroyed it already. No barrier is needed around it: the
    launcher returns from init_process_group() on no rank before every rank has connected,
    and rank 0, which serves the store, leaves last (see docs/launcher.md)."""
    import torch.distributed as dist

    dist.init_process_group("gloo", **kwargs)
    try:
        yield
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def weights_apart(a: dict, b: dict) -> float:
    """The largest |a - b| over two state dicts: nan if any is nan (which no tolerance
    passes: compare with `not diff <= tol`), inf if their keys differ."""

    if a.keys() != b.keys():
        return math.inf
    diffs = [(a[k].double() - b[k].double()).abs().max().item() for k in a]
    return math.nan if any(map(math.isnan, diffs)) else max(diffs, default=0.0)


def rank_folder(folder: str, rank: int) -> str:
    """The subfolder of rank `rank` in a check's folder: what lands there shows who wrote."""

    return os.path.join(folder, f"rank{rank}")


@contextlib.contextmanager
def rank_folders(ranks: int, prefix: str):
    """A temporary folder with an empty subfolder per rank, removed afterwards (whatever the
    ranks made there: a learner's answer can nest folders past any recursion limit)."""

    folder = tempfile.mkdtemp(prefix=prefix)
    try:
        for rank in range(ranks):
            os.mkdir(rank_folder(folder, rank))
        yield folder
    finally:
        remove_tree(folder)


def writers(folder: str, ranks: int) -> list[int]:
    """The ranks whose subfolder is no longer empty."""

    return [rank for rank in range(ranks) if os.listdir(rank_folder(folder, rank))]
