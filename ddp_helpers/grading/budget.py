"""How long one submission may take: every time limit of the grader's in one place, the
`budget` of GradeOptions, handed to the worker as it is."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .defaults import DEFAULT_TIMEOUT


@dataclass(frozen=True)
class TimeBudget:
    """Seconds for each part of grading one submission."""

    notebook: float = DEFAULT_TIMEOUT  # the notebook's run, all its cells (grade --timeout)
    kernel_start: float = 60.0  # a fresh kernel to answer: not counted in `notebook`
    probe: float = 30.0  # after a cell stopped at the limit: taking out what it defined
    # Each exercise's check gets max(notebook, check_floor): a check that runs ranks has its
    # own 30 s hang detection, and must have the time to say what hung.
    check_floor: float = 60.0
    # The worker enforces the limits above and reports on them. The grader stops a worker
    # that outlived all of them by this much (a worker stuck in its own clean-up).
    slack: float = 120.0

    @property
    def check(self) -> float:
        """Seconds one exercise's check may run."""
        return max(self.notebook, self.check_floor)

    def total(self, exercises: int) -> float:
        """Seconds the whole submission may take, `exercises` checks included: the grader's
        backstop."""
        return self.kernel_start + self.notebook + self.probe + exercises * self.check + self.slack

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> TimeBudget:
        return cls(**data)
