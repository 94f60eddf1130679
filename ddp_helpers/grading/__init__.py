"""Instructors' grading: `python -m ddp_helpers grade PATH... --out grades.csv` (any lesson).

Each submission is graded by a worker process of its own (worker.py), which the grader
starts and supervises (dispatch.py): a fresh kernel runs the notebook under a wall-clock
limit (kernel.py), and separate scorer processes check the answers with the grader's own
copy of the checks (scorer.py). The batch (batch.py) runs the workers N at a time and
hands each row to its outputs (outputs.py: the CSV, feedback, Gradescope, class report).
"""

from ..lazy import lazy_getattr

# Loaded when first used: `from ddp_helpers.grading import grade` as ever, while importing
# one of grading's modules (its data types: results.py) loads only what that one needs.
_LAZY = {
    "run_batch": "api",
    "DEFAULT_TIMEOUT": "defaults",
    "Batch": "batch",
    "GradeOptions": "batch",
    "TimeBudget": "budget",
    "grade": "batch",
    "Event": "results",
    "ExerciseScore": "results",
    "Outcome": "results",
    "Row": "results",
    "Status": "results",
    "Submission": "results",
    "GradingError": "submissions",
    "find_submissions": "submissions",
    "lesson_of": "submissions",
}

__getattr__ = lazy_getattr(__name__, _LAZY)


__all__ = [
    "DEFAULT_TIMEOUT",
    "Batch",
    "Event",
    "ExerciseScore",
    "GradeOptions",
    "GradingError",
    "Outcome",
    "Row",
    "Status",
    "Submission",
    "TimeBudget",
    "find_submissions",
    "grade",
    "lesson_of",
    "run_batch",
]
