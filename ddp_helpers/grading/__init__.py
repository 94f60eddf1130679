"""Instructors' grading: `python -m ddp_helpers grade PATH... --out grades.csv` (any lesson).

Each submission is graded by a worker process of its own (worker/process.py), which the
grader starts and supervises (orchestration/dispatch.py): a fresh kernel runs the notebook
under a wall-clock limit (worker/kernel.py), and separate scorer processes check the
answers with the grader's own copy of the checks (worker/scorer.py), inside the limits of
confinement/. The batch (orchestration/batch.py) runs the workers N at a time and hands
each row to its outputs (outputs/writers.py: the CSV, feedback, Gradescope's results.json,
class report). gradescope/ also builds Gradescope's own autograder.
"""

from ..lazy import lazy_getattr

# Loaded when first used: `from ddp_helpers.grading import grade` as ever, while importing
# one of grading's modules (its data types: results.py) loads only what that one needs.
_LAZY = {
    "run_batch": "api",
    "DEFAULT_TIMEOUT": "defaults",
    "Batch": "orchestration.batch",
    "ConfinementRequest": "confinement.sandbox",
    "GradeOptions": "orchestration.batch",
    "TimeBudget": "budget",
    "grade": "orchestration.batch",
    "Event": "results",
    "ExerciseScore": "results",
    "Outcome": "results",
    "Row": "results",
    "Status": "results",
    "Submission": "results",
    "GradingError": "orchestration.submissions",
    "find_submissions": "orchestration.submissions",
    "lesson_of": "notebooks",
}

__getattr__ = lazy_getattr(__name__, _LAZY)


__all__ = [
    "DEFAULT_TIMEOUT",
    "Batch",
    "ConfinementRequest",
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
