"""Instructors' grading: `python -m ddp_helpers grade PATH... --out grades.csv` (any lesson).

Each submission is graded by a worker process of its own (worker.py), which the grader
starts and supervises (dispatch.py): a fresh kernel runs the notebook under a wall-clock
limit (kernel.py), and separate scorer processes check the answers with the grader's own
copy of the checks (scorer.py). The batch (batch.py) runs the workers N at a time and
hands each row to its outputs (outputs.py: the CSV, feedback, Gradescope, class report).
"""

from .batch import DEFAULT_TIMEOUT, Batch, GradeOptions, grade
from .results import Event, ExerciseScore, Outcome, Row, Status, Submission
from .submissions import GradingError, find_submissions, lesson_of

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
    "find_submissions",
    "grade",
    "lesson_of",
]
