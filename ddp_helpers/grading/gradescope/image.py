"""Inside Gradescope's image, once, at its build: setup.sh's last step checks what it
installed (`python -m ddp_helpers.grading.gradescope setup SOURCE`) and records the Python
that run_autograder uses."""

from __future__ import annotations

import importlib
import platform
import sys
from pathlib import Path

from ...exercises import exercises_of
from ...versions import torch_release
from .config import TORCH_INDEX, AutograderError, read_config

INSTRUCTOR_TEXT = {
    "version_mismatch": (
        "setup.sh installed {name} {found}, but this autograder was built with {wanted}. "
        "Build the zip again (`python -m ddp_helpers autograder --lesson {lesson}`) and "
        "upload it; nothing else should install {name} in the image."
    ),
    "torch_mismatch": (
        "torch {found} is installed, but this autograder pins torch {wanted}, the version "
        "the course's checks are tested with. Install that version (setup.sh does, from "
        "{index}) or build the zip again from a course with other pins."
    ),
    "missing_module": (
        "The grader needs {module}, which is not installed ({error}); setup.sh installs it "
        "with the course's wheel: see the pip output above."
    ),
    "ready": (
        "Autograder for lesson {lesson} ready: ddp-basics {version}, torch {torch}, "
        "Python {python} ({executable})."
    ),
}


def finish_setup(source: Path) -> str:
    """setup.sh's check: the package and torch it pins, the grader's modules; then record
    this Python for run_autograder (source/python). Returns the line that says so."""
    from importlib.metadata import version

    config = read_config(source)
    found = version(config["distribution"])
    if found != config["version"]:
        raise AutograderError(
            INSTRUCTOR_TEXT["version_mismatch"].format(
                name=config["distribution"], found=found, wanted=config["version"], **config
            )
        )
    for module in ("torch", "ipykernel", "jupyter_client", "nbformat", "psutil", "cloudpickle"):
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise AutograderError(
                INSTRUCTOR_TEXT["missing_module"].format(module=module, error=exc)
            ) from None
    import torch

    if torch_release() != config["torch"]:
        raise AutograderError(
            INSTRUCTOR_TEXT["torch_mismatch"].format(
                found=torch.__version__, wanted=config["torch"], index=TORCH_INDEX
            )
        )
    exercises_of(config["lesson"])  # the checks and the extra cases import
    (source / "python").write_text(sys.executable + "\n", encoding="utf-8")
    return INSTRUCTOR_TEXT["ready"].format(
        lesson=config["lesson"],
        version=found,
        torch=torch.__version__,
        python=platform.python_version(),
        executable=sys.executable,
    )
