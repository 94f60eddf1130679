"""Versions as the course compares them: a release without its local label (`2.13.0+cpu`
is 2.13.0), in one place."""

from __future__ import annotations


def release(version: str) -> str:
    """`2.13.0+cpu` -> `2.13.0`: the release, whatever build of it is installed."""
    return str(version).split("+")[0]


def torch_release() -> str:
    """The release of the torch imported in this process."""
    import torch

    return release(torch.__version__)
