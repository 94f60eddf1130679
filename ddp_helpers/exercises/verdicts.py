"""What a check can find, as words the grader writes: a leaf that imports nothing else of
the course, so that the grader's data types load without the launcher or the checks."""

from __future__ import annotations

from enum import StrEnum


class CheckStatus(StrEnum):
    """What a check found; the grader's CSV, feedback and reports show these words.

    In the order the class report lays its columns out.
    """

    CORRECT = "correct"
    WRONG = "wrong"
    NOT_ATTEMPTED = "not_attempted"  # the stub `build` wrote is still there
    ERROR = "error"
    MISSING = "missing"  # nothing of the exercise's name in the notebook


# How each status looks wherever it is shown, in one table: its mark (the feedback, the
# notebook's messages, whose catalog texts begin with it: tests/test_i18n.py) and its colour
# (the class report). Its name, in the current language: texts.status_names().
LOOKS = {
    CheckStatus.CORRECT: ("✅", "#2e7d32"),
    CheckStatus.WRONG: ("❌", "#c62828"),
    CheckStatus.NOT_ATTEMPTED: ("⏳", "#9e9e9e"),
    CheckStatus.ERROR: ("💥", "#ef6c00"),
    CheckStatus.MISSING: ("❔", "#5c6bc0"),
}


def mark(status: CheckStatus) -> str:
    return LOOKS[status][0]


def colour(status: CheckStatus) -> str:
    return LOOKS[status][1]


class Hidden(StrEnum):
    """How an answer did on the grader's extra cases (Gradescope's test status too)."""

    PASSED = "passed"
    FAILED = "failed"
