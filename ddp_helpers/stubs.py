"""Solution regions and the stub `build` puts in their place, defined once: the markers
authors write, the line learners get, and how a check or `export` recognises that line.
"""

from __future__ import annotations

import re

# `# BEGIN SOLUTION (from exercise 2.2)`: a later lesson asks for an earlier answer again
# (pasted in); its stub names that exercise and it does not count among this lesson's.
# `# BEGIN SOLUTION (continued)`: another region of the exercise before it (a class whose
# methods each hold part of the answer); its stub names that exercise too.
BEGIN = re.compile(r"^(\s*)# BEGIN SOLUTION(?: \((?:from exercise (\d+\.\d+)|(continued))\))?\s*$")
END = re.compile(r"^\s*# END SOLUTION\s*$")

ERROR = "NotImplementedError"  # the type of what a stub raises
_MESSAGE = r"exercise (\d+\.\d+)"
_LINE = re.compile(rf'\s*raise {ERROR}\("{_MESSAGE}"\)\s*')


def stub_line(exercise: str, indent: str = "") -> str:
    """The line in place of an answer: `raise NotImplementedError("exercise 1.2")`."""
    return f'{indent}raise {ERROR}("exercise {exercise}")'


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
