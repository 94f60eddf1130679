"""How long a lesson's core path takes: the estimate at the top of every notebook (authors)."""

from __future__ import annotations

import re
from dataclasses import dataclass

# The rates behind the estimate: prose read at 200 words a minute (careful non-fiction
# reading), code skimmed at 30 lines a minute, 5 s per code cell to run it and look at
# its output, 1.5 minutes per exercise to write and check an answer.
WORDS_PER_MINUTE = 200
CODE_LINES_PER_MINUTE = 30
SECONDS_PER_CODE_CELL = 5
MINUTES_PER_EXERCISE = 1.5
TARGET_MINUTES = 15

GOING_FURTHER = re.compile(r"^## Going further", re.M)
STATED = re.compile(r"\*Core path: about (\d+) minutes of reading and running, (\d+) exercises?\.")
_WORD = re.compile(r"[A-Za-z0-9_'`.-]+")
_STUB = re.compile(r'raise NotImplementedError\("exercise \d+\.\d+"\)')


@dataclass(frozen=True)
class CorePath:
    """What a learner reads, runs and writes before the optional "Going further" section."""

    words: int
    code_cells: int
    code_lines: int
    exercises: int

    @property
    def minutes(self) -> float:
        return (
            self.words / WORDS_PER_MINUTE
            + self.code_lines / CODE_LINES_PER_MINUTE
            + self.code_cells * SECONDS_PER_CODE_CELL / 60
            + self.exercises * MINUTES_PER_EXERCISE
        )

    @property
    def rounded(self) -> int:
        return int(self.minutes + 0.5)


def core_path(lesson) -> CorePath:
    """Count a lesson notebook (as handed out, with stubs) up to "## Going further"."""
    words = code_cells = code_lines = exercises = 0
    for cell in lesson.cells:
        if cell.cell_type == "markdown":
            head = GOING_FURTHER.split(cell.source)[0]
            words += len(_WORD.findall(head))
            if head != cell.source:
                break
        elif cell.cell_type == "code":
            code_cells += 1
            lines = [line.strip() for line in cell.source.splitlines()]
            code_lines += sum(1 for line in lines if line and not line.startswith("#"))
            exercises += len(_STUB.findall(cell.source))
    return CorePath(words, code_cells, code_lines, exercises)


def stated(lesson) -> tuple[int, int] | None:
    """(minutes, exercises) as the notebook's first cell states them, or None."""
    m = STATED.search(lesson.cells[0].source) if lesson.cells else None
    return (int(m.group(1)), int(m.group(2))) if m else None
