"""An answer's error as a check shows it to the learner: what an answer raised on its rank
(AnswerRaised), the stub `build` wrote (not attempted), and tracebacks without the course's own
frames (checks, launcher), which are noise to a learner."""

from __future__ import annotations

import os
import re
import traceback

from ..launcher import DistributedError
from ..stubs import exercise_raised
from .texts import MESSAGES


def short_traceback(exc: BaseException, limit: int = 4) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    # Keep the learner's frames and the last ones; the checker's own are noise.
    own = [f for f in frames if "ddp_helpers/exercises" not in f.filename]
    shown = (own or frames)[-limit:]
    lines = traceback.format_list(shown)
    return "".join(lines) + "".join(traceback.format_exception_only(type(exc), exc))


def stub_of(exc: BaseException) -> str | None:
    """The exercise whose build-written stub raised exc (also inside a rank), or None.

    Only the stub as `build` writes it means "not attempted"; any other
    NotImplementedError is the answer's own error.
    """
    if isinstance(exc, (DistributedError, AnswerRaised)):
        return exercise_raised(exc.exc_type or "", exc.exc_message or "")
    return exercise_raised(type(exc).__name__, str(exc))


class AnswerRaised(Exception):
    """The answer raised on the rank that run_answer ran it on: what it raised, as text."""

    def __init__(self, exc_type: str, exc_message: str, traceback_text: str):
        super().__init__(f"{exc_type}: {exc_message}")
        self.exc_type, self.exc_message, self.traceback = exc_type, exc_message, traceback_text


# A frame of a traceback as text: its first line, '  File "path", line N, in name'.
_FRAME_LINE = re.compile(r'^  File "(?P<file>[^"]*)", line \d+')
_CHAINED = re.compile(
    r"\n\n(?:During handling of the above exception|The above exception)[^\n]*\n\n"
)


def answer_traceback(text: str, limit: int = 4) -> str:
    """A rank's traceback as short_traceback shows one: the last `limit` frames that are
    not the course's (checks, launcher), then the exception; of a chain, the last one."""
    text = _CHAINED.split(text or "")[-1]
    frames: list[list[str]] = []
    tail: list[str] = []
    for line in text.splitlines():
        if line.startswith("Traceback (most recent call last)"):
            continue
        match = _FRAME_LINE.match(line)
        if match:
            frames.append([line])
            tail = []
        elif line.startswith("    ") and frames and not tail:
            frames[-1].append(line)
        else:
            tail.append(line)
    own = [f for f in frames if not _is_course_file(_FRAME_LINE.match(f[0])["file"])]
    shown = (own or frames)[-limit:]
    return "\n".join([*(line for frame in shown for line in frame), *tail]) + "\n"


# What shows the course's own frames in a check's tracebacks: `%env DDP_HELPERS_TRACEBACK=full`.
FULL_TRACEBACK = "DDP_HELPERS_TRACEBACK"


def without_course_frames(text: str) -> str:
    """The ranks' tracebacks of a check's error without the frames of the course's own
    files (the harness that called the answer, the launcher), which are noise to a learner;
    a line at the end says how to see them. Unless DDP_HELPERS_TRACEBACK is `full`."""

    if os.environ.get(FULL_TRACEBACK) == "full":
        return text
    kept: list[str] = []
    hidden = skipping = False
    for line in text.splitlines():
        match = _FRAME_LINE.match(line)
        if match:
            skipping = _is_course_file(match["file"])
            hidden |= skipping
        elif not line.startswith("    "):
            skipping = False
        if not skipping:
            kept.append(line)
    if hidden:
        kept.append(MESSAGES["course_frames_hidden"].format(variable=FULL_TRACEBACK))
    return "\n".join(kept)


def _is_course_file(path: str) -> bool:
    return any(part in path for part in ("ddp_helpers/exercises", "ddp_helpers/launcher"))
