"""The grader's defaults, in a leaf: what `python -m ddp_helpers` needs to build its command
line without loading the grader (or the launcher), and what the grader's modules use."""

from __future__ import annotations

DEFAULT_TIMEOUT = 300.0  # seconds a notebook may run
DEFAULT_TASKS = 512  # processes and threads of a submission: a 2-rank lesson uses about 100
DEFAULT_DISK = 1 << 30  # bytes a submission may write (its folders and logs): a lesson, ~1M
VISIBILITIES = ("hidden", "after_due_date", "after_published", "visible")  # Gradescope's
DEFAULT_VISIBILITY = "after_published"  # when Gradescope shows the grader's extra cases
DEFAULT_OUT = "grades.csv"  # grade's CSV
DEFAULT_ZIP = "autograder.zip"  # the autograder command's zip


def sandbox_from_env(value: str | None) -> bool | None:
    """DDP_HELPERS_SANDBOX as --sandbox's default: 1 is --sandbox, 0 is --no-sandbox, unset
    (or 'auto') is the sandbox where it can run."""
    value = (value or "").strip().lower()
    if value in ("", "auto"):
        return None
    return value not in ("0", "false", "no", "off")
