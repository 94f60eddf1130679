"""Solution regions and the stub `build` puts in their place, defined once: the markers
authors write, the line learners get, and how a check or `export` recognises that line.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

# `# BEGIN SOLUTION (from exercise 2.2)`: a later lesson asks for an earlier answer again
# (pasted in); its stub names that exercise and it does not count among this lesson's.
# `# BEGIN SOLUTION (continued)`: another region of the exercise before it (a class whose
# methods each hold part of the answer); its stub names that exercise too.
BEGIN = re.compile(r"^(\s*)# BEGIN SOLUTION(?: \((?:from exercise (\d+\.\d+)|(continued))\))?\s*$")
END = re.compile(r"^\s*# END SOLUTION\s*$")


@dataclass
class Region:
    """One solution region: the exercise it answers, as `build` numbers it, and its lines."""

    exercise: str
    pasted: bool  # an earlier lesson's answer asked for again (from exercise N.M)
    continued: bool  # more of the answer of the region before it
    indent: str  # the BEGIN line's, which the stub takes
    begin: int  # the BEGIN line's number in its cell, from 1
    lines: list[str] = field(default_factory=list)


class RegionError(ValueError):
    """A marker without its pair: `kind` "stray_end" or "unclosed", at `line` of its cell."""

    def __init__(self, kind: str, line: int):
        super().__init__(f"{kind} at line {line}")
        self.kind, self.line = kind, line


class Regions:
    """The one walker of a solution notebook's regions, cell after cell, numbered as the
    lesson's exercises are: each region of the lesson's own is the next exercise (from
    `first`), unless it continues the one before; a pasted one keeps its exercise. Used by
    build (the stubs), the website (what no page may show) and pace (the answers' lines)."""

    def __init__(self, lesson: str, first: int = 1):
        self.lesson, self.first, self.count = lesson, first, 0

    def walk(self, source: str) -> Iterator[str | Region]:
        """The cell's lines outside regions (str) and its regions (Region), in order."""
        region = None
        for n, line in enumerate(source.split("\n"), 1):
            if region is None:
                m = BEGIN.match(line)
                if m:
                    region = self._region(m, n)
                elif END.match(line):
                    raise RegionError("stray_end", n)
                else:
                    yield line
            elif END.match(line):
                yield region
                region = None
            else:
                region.lines.append(line)
        if region is not None:
            raise RegionError("unclosed", region.begin)

    def _region(self, m: re.Match, n: int) -> Region:
        pasted, continued = m.group(2), m.group(3) is not None
        if pasted is None and not (continued and self.count):
            self.count += 1
        exercise = pasted or f"{self.lesson}.{self.first + self.count - 1}"
        return Region(exercise, pasted is not None, continued, m.group(1), n)


ERROR = "NotImplementedError"  # the type of what a stub raises
# The stub's words are its notebook's language ("演習 1.2" in the Japanese edition).
STUB_WORD = {"en": "exercise", "ja": "演習"}
_MESSAGE = rf"(?:{'|'.join(STUB_WORD.values())}) (\d+\.\d+)"
_LINE = re.compile(rf'\s*raise {ERROR}\("{_MESSAGE}"\)\s*')


def stub_line(exercise: str, indent: str = "", lang: str = "en") -> str:
    """The line in place of an answer: `raise NotImplementedError("exercise 1.2")`."""
    return f'{indent}raise {ERROR}("{STUB_WORD[lang]} {exercise}")'


def exercise_raised(error: str, message: str) -> str | None:
    """The exercise whose stub raised an error of this type name and message, or None."""
    if error != ERROR:
        return None
    m = re.fullmatch(_MESSAGE, message.strip())
    return m.group(1) if m else None


def exercise_in(line: str) -> str | None:
    """The exercise whose stub this line of source is, or None."""
    m = _LINE.fullmatch(line)
    return m.group(1) if m else None
