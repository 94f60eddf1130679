"""What a batch writes: the CSV, the feedback files, Gradescope's results.json, the class
report. Each is an object with the same two methods, so the batch calls them in turn and
adding an output touches no loop: row_done(row) as each submission is settled, and
batch_done(rows, wall) once, when the batch ends or is interrupted."""

from __future__ import annotations

import csv
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Protocol

from ...files import replaced_whole
from ..results import Row
from .class_report import Tally, write_report
from .gradescope_json import results_paths, write_results
from .reports import csv_cells, csv_header, write_feedback

# What the batch's last line says each output wrote, and its warnings: for the instructor.
INSTRUCTOR_TEXT = {
    "feedback_failed": "warning: could not write the feedback of {name}: {error}",
    "csv": "{path}",
    "feedback": "feedback: {folder}/ ({count} files)",
    "gradescope": "Gradescope: {folder}/",
    "report": "class report: {path}",
}


class Output(Protocol):
    """One thing a batch writes."""

    def row_done(self, row: Row) -> None:
        """A submission's final row, as submissions finish (not in submission order)."""

    def batch_done(self, rows: list[Row], wall: float) -> str:
        """The batch ended (also when interrupted) after `wall` seconds; `rows` in
        submission order. Returns what it wrote, for the batch's last line."""


class GradesCsv:
    """grades.csv: the header at once, a row as each submission finishes (an interrupted
    batch keeps what it graded), all of them in submission order at the end."""

    def __init__(self, path, columns: list[tuple[str, str]]):
        self.path, self.columns = Path(path), columns
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "w", newline="", encoding="utf-8") as f:
            csv.writer(f).writerow(csv_header(columns))

    def row_done(self, row: Row) -> None:
        # Opened per row, so each row is on disk once written; an OSError ends the batch.
        with open(self.path, "a", newline="", encoding="utf-8") as f:
            csv.writer(f).writerow(csv_cells(row, self.columns))

    def batch_done(self, rows: list[Row], wall: float) -> str:
        with replaced_whole(self.path, newline="", encoding="utf-8") as f:
            out = csv.writer(f)
            out.writerow(csv_header(self.columns))
            out.writerows(csv_cells(row, self.columns) for row in rows)
        return INSTRUCTOR_TEXT["csv"].format(path=self.path)


class _FilePerSubmission(ABC):
    """A file per submission; one that cannot be written costs a warning, not the batch."""

    def __init__(self, paths: dict[str, Path], warn):
        self.paths, self.warn = paths, warn  # warn(text): a line for the instructor

    @abstractmethod
    def write(self, row: Row, path: Path) -> None:
        """Write row's file at path."""

    def row_done(self, row: Row) -> None:
        name = row.submission.name
        try:
            self.write(row, self.paths[name])
        except Exception as exc:  # noqa: BLE001 - one row's file, never the batch
            self.warn(INSTRUCTOR_TEXT["feedback_failed"].format(name=name, error=exc))


class FeedbackFiles(_FilePerSubmission):
    """One Markdown file per submission, for the learner, in `folder`."""

    def __init__(self, folder, names: dict[str, str], timeout: float, warn):
        Path(folder).mkdir(parents=True, exist_ok=True)
        super().__init__({sub: Path(folder) / name for sub, name in names.items()}, warn)
        self.folder, self.timeout = folder, timeout

    def write(self, row: Row, path: Path) -> None:
        write_feedback(row, path, self.timeout)

    def batch_done(self, rows: list[Row], wall: float) -> str:
        return INSTRUCTOR_TEXT["feedback"].format(folder=self.folder, count=len(rows))


class GradescopeResults(_FilePerSubmission):
    """Gradescope's results.json per submission in `folder` (folder/results.json for one)."""

    def __init__(self, folder, names: dict[str, str], hidden_visibility: str, warn):
        super().__init__(results_paths(Path(folder), names), warn)
        self.folder, self.hidden_visibility = folder, hidden_visibility

    def write(self, row: Row, path: Path) -> None:
        write_results(row, path, self.hidden_visibility)

    def batch_done(self, rows: list[Row], wall: float) -> str:
        return INSTRUCTOR_TEXT["gradescope"].format(folder=self.folder)


class ClassReport:
    """The class report, one HTML file, written once the batch ends from what was counted
    as each row was settled (the batch keeps no row's messages)."""

    def __init__(self, path, timeout: float):
        self.path, self.timeout = path, timeout
        self.counted = Tally()

    def row_done(self, row: Row) -> None:
        self.counted.add(row)

    def batch_done(self, rows: list[Row], wall: float) -> str:
        write_report(rows, self.path, self.timeout, wall, self.counted)
        return INSTRUCTOR_TEXT["report"].format(path=self.path)
