"""What the three places of the autograder share: the zip's config file and its names."""

from __future__ import annotations

import json
from pathlib import Path

from ...exercises import LESSONS

DISTRIBUTION = "ddp-basics"
CONFIG = "autograder.json"
TORCH_INDEX = "https://download.pytorch.org/whl/cpu"  # CPU-only wheels, reachable from Gradescope
SKIP = (".ipynb_checkpoints", "__MACOSX", "__pycache__")  # never the course's nor a learner's

INSTRUCTOR_TEXT = {
    "no_config": (
        "{path} is missing or unreadable ({error}): {source} is not the folder of an "
        "autograder that `python -m ddp_helpers autograder` built."
    ),
}


class AutograderError(Exception):
    """The autograder cannot be built, set up or run; the message says what to do."""


def read_config(source: Path) -> dict:
    """The config the zip was built with (source: the unpacked zip, /autograder/source)."""
    path = source / CONFIG
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
        if config["lesson"] not in LESSONS:
            raise KeyError(f"no lesson {config['lesson']!r}")
        return config
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise AutograderError(
            INSTRUCTOR_TEXT["no_config"].format(path=path, error=exc, source=source)
        ) from None
