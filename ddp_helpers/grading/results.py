"""What grading produces, as types: each exercise's score, what happened, each submission's row."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from pathlib import Path

from ..exercises.verdicts import CheckStatus, Hidden


class Status(StrEnum):
    """A submission's status in the CSV."""

    OK = "ok"  # the notebook ran to its end
    TIMEOUT = "timeout"  # it, or an answer's check, ran past the limit
    ERROR = "error"  # its kernel died, or an answer ended the checking process
    INVALID = "invalid"  # not a notebook, not a lesson, or the wrong lesson


STATUSES = tuple(s.value for s in Status)


@dataclass(frozen=True)
class Submission:
    """One notebook handed in: where it is, its lesson, or why it cannot be graded."""

    path: Path
    name: str  # as shown in the CSV: the path as given, relative where it can be
    lesson: str | None = None
    problem: str | None = None  # why it is invalid
    student: str = ""  # from its path: the learner's folder, or --student-from
    language: str = "en"  # its metadata's: its feedback and check messages are in it
    # The course's solved notebook it is, and whether as the same file (a hard link) or a
    # copy byte for byte: said in its feedback and the class report, its score as any copy's.
    course_copy: tuple[str, bool] | None = None


@dataclass(frozen=True)
class ExerciseScore:
    """One exercise of a submission, as the grader's own check judged it."""

    id: str
    name: str
    max: int
    status: CheckStatus
    message: str = ""
    hint: str | None = None
    hidden: Hidden | None = None  # None: the grader's extra cases did not run
    mistake: str | None = None  # its key (the exercise's MESSAGES), None when correct
    fields: dict[str, str] = field(default_factory=dict)  # those the mistake's title names

    def __post_init__(self):
        # Read back from JSON (the scorer's lines, the worker's outcome) as plain words.
        object.__setattr__(self, "status", CheckStatus(self.status))
        if self.hidden is not None:
            object.__setattr__(self, "hidden", Hidden(self.hidden))

    @property
    def points(self) -> int:
        return self.max if self.status is CheckStatus.CORRECT else 0

    @property
    def column(self) -> str:
        """Its CSV column: '1.2 shard'."""
        return f"{self.id} {self.name}"


@dataclass(frozen=True)
class Event:
    """Something that happened while grading: a cell's error, a timeout, a crash, a retry."""

    kind: str  # cell_error, timeout, died, kernel, probe, check_timeout, check_died, ...
    text: str
    detail: str = ""
    cell: int | None = None
    exercise: str | None = None
    name: str | None = None  # of a cell's error: the exception's type (MemoryError, ...)


@dataclass(frozen=True)
class Outcome:
    """What the worker process reports for one submission (it travels as one JSON line)."""

    status: Status
    exercises: list[ExerciseScore]
    events: list[Event] = field(default_factory=list)
    run_seconds: float | None = None
    score_seconds: float | None = None

    def to_json(self) -> dict:
        data = asdict(self)
        data["status"] = self.status.value
        return data

    @classmethod
    def from_json(cls, data: dict) -> Outcome:
        return cls(
            status=Status(data["status"]),
            exercises=[ExerciseScore(**e) for e in data["exercises"]],
            events=[Event(**e) for e in data["events"]],
            run_seconds=data["run_seconds"],
            score_seconds=data["score_seconds"],
        )


@dataclass(frozen=True)
class Row:
    """One submission graded: a row of the CSV and a feedback file."""

    submission: Submission
    status: Status
    exercises: list[ExerciseScore] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    seconds: float = 0.0  # the grader's time on it, tries included
    run_seconds: float | None = None  # of which the notebook ran
    score_seconds: float | None = None  # and the checks

    @property
    def points(self) -> int:
        return sum(e.points for e in self.exercises)

    @property
    def max_points(self) -> int | None:
        return None if self.status is Status.INVALID else sum(e.max for e in self.exercises)

    def kept(self) -> Row:
        """The row as a batch keeps it once its outputs have it: points, statuses and
        mistake keys, without messages, hints and events (so that the grader's memory does
        not grow with what the submissions say)."""
        scores = [replace(e, message="", hint=None) for e in self.exercises]
        return replace(self, exercises=scores, events=[])

    @classmethod
    def invalid(cls, submission: Submission) -> Row:
        return cls(submission, Status.INVALID, events=[Event("invalid", submission.problem or "")])
