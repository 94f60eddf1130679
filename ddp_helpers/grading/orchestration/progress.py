"""What the instructor watches while a batch runs: a line per finished submission and, on a
terminal, a bar below them. The batch (batch.py) drives it: what runs, what finished."""

from __future__ import annotations

import time

from ..outputs.escape import line, printable
from ..results import STATUSES, Row

# What the instructor reads: English only.
INSTRUCTOR_TEXT = {
    "line": "[{done:>{width}}/{total}] {status:<8} {points:>5}  {seconds:5.1f} s  {submission}",
}


class Progress:
    """A line per finished submission; on a terminal, a bar below them as well."""

    def __init__(self, total: int, stream):
        self.total, self.stream, self.done_count, self.running = total, stream, 0, 0
        self.started = time.monotonic()
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.counts = dict.fromkeys(STATUSES, 0)

    def say(self, text: str) -> None:
        """Lines for the instructor (what they name may be a learner's: made printable)."""
        self._clear()
        print(printable(text), file=self.stream, flush=True)

    def finished(self, row: Row) -> None:
        self.done_count += 1
        self.counts[row.status.value] += 1
        points = f"{row.points}/{row.max_points}" if row.max_points is not None else "-"
        self._clear()
        print(
            INSTRUCTOR_TEXT["line"].format(
                done=self.done_count,
                width=len(str(self.total)),
                total=self.total,
                status=row.status.value,
                points=points,
                seconds=row.seconds,
                submission=line(row.submission.name),
            ),
            file=self.stream,
            flush=True,
        )
        self.tick()

    def bar(self, width: int = 30) -> str:
        filled = round(width * self.done_count / self.total) if self.total else width
        counts = " ".join(f"{s} {n}" for s, n in self.counts.items() if n)
        return (
            f"[{'#' * filled}{'.' * (width - filled)}] {self.done_count}/{self.total} "
            f"· {self.running} running · {time.monotonic() - self.started:.0f} s"
            + (f" · {counts}" if counts else "")
        )

    def tick(self) -> None:
        if self.tty:
            self.stream.write("\r\x1b[K" + self.bar())
            self.stream.flush()

    def _clear(self) -> None:
        if self.tty:
            self.stream.write("\r\x1b[K")

    def done(self) -> None:
        self._clear()
