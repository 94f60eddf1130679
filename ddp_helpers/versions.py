"""Versions as the course compares them: a release without its local label (`2.13.0+cpu`
is 2.13.0), in one place."""

from __future__ import annotations

import re


def release(version: str) -> str:
    """`2.13.0+cpu` -> `2.13.0`: the release, whatever build of it is installed."""
    return str(version).split("+")[0]


def torch_release() -> str:
    """The release of the torch imported in this process."""
    import torch

    return release(torch.__version__)


def requirement_lines(text: str) -> list[str]:
    """The requirements of a requirements or constraints file (pip-compile's too): each as
    written, without comments, hashes, continuations or pip's options (-c, --index-url)."""
    found = []
    for line in text.replace("\\\n", " ").splitlines():
        line = line.split(" #")[0].split(" --")[0].strip()
        if line and not line.startswith(("#", "-")):
            found.append(line)
    return found


def locked(text: str) -> dict[str, str]:
    """A lock file's `name==version` pins: canonical name -> version, as written (a local
    label kept). A line that is not such a pin is a ValueError naming it."""
    pins = {}
    for line in requirement_lines(text):
        match = re.fullmatch(r"([A-Za-z0-9_.\-]+)\s*==\s*([^\s;]+)(\s*;.*)?", line)
        if match is None:
            raise ValueError(f"not a plain `name==version` pin: {line!r}")
        pins[re.sub(r"[-_.]+", "-", match.group(1)).lower()] = match.group(2)
    return pins
