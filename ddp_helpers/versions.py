"""Versions as the course compares them: a release without its local label (`2.13.0+cpu`
is 2.13.0), in one place."""

from __future__ import annotations

import importlib.metadata
import re
import sys


def release(version: str) -> str:
    """`2.13.0+cpu` -> `2.13.0`: the release, whatever build of it is installed."""
    return str(version).split("+")[0]


def torch_release() -> str:
    """The release of the torch imported in this process."""
    import torch

    return release(torch.__version__)


def installed_torch_release() -> str | None:
    """The release of torch this process runs or would import, without importing it: the
    imported one's where it is, else the installed distribution's (None where there is none).
    For what a module says as it is imported (lesson 05's note), where `import torch` (1-2 s)
    would cost every process that imports it, the grader's scorers among them."""
    torch = sys.modules.get("torch")
    if torch is not None:
        return release(torch.__version__)
    try:
        return release(importlib.metadata.version("torch"))
    except importlib.metadata.PackageNotFoundError:
        return None


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
