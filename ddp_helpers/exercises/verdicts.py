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


class Hidden(StrEnum):
    """How an answer did on the grader's extra cases (Gradescope's test status too)."""

    PASSED = "passed"
    FAILED = "failed"
