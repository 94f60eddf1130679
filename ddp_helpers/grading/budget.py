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
    interrupt_grace: float = 5.0  # a cell interrupted at the limit: its traceback arrives
    worker_grace: float = 15.0  # a stopped worker: killing what it started, cleaning up
    reap: float = 5.0  # the processes killed in a submission's cgroups: out of them
    # The worker enforces the limits above and reports on them. The grader stops a worker
    # that outlived all of them by this much (a worker stuck in its own clean-up).
    slack: float = 120.0

    def check(self, exercise) -> float:
        """Seconds an exercise's check may run: the notebook's limit, or the exercise's own
        worst case where that is longer (its cases, then its hang detection and the stop:
        Exercise.worst), so that a hang is named by the check, not cut by the grader."""
        return max(self.notebook, exercise.worst)

    def total(self, exercises) -> float:
        """Seconds the whole submission may take, the checks of `exercises` included: the
        grader's backstop."""
        checks = sum(self.check(ex) for ex in exercises)
        return self.kernel_start + self.notebook + self.probe + checks + self.slack

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> TimeBudget:
        return cls(**data)


@dataclass(frozen=True)
class Ticks:
    """How often the grader looks, in seconds: no limit, but how soon it sees an event that
    nothing tells it of (a cell's end is a message, a kernel's exit is not)."""

    watch: float = 0.1  # a running cell: its kernel alive, its channels, the cage's limits
    sockets: float = 0.02  # a starting kernel: whether it has made its sockets yet
    reply: float = 0.2  # a starting kernel: one wait on a channel for an answer
    probe: float = 1.0  # a starting kernel: how long one readiness probe waits for it
    worker: float = 0.5  # a worker: whether it ended, its descendants noted
    progress: float = 1.0  # the batch's progress line, redrawn
    cgroup_v1: float = 0.05  # a v1 cgroup (which says nothing when it empties): read again


TICKS = Ticks()
