"""Issue 49's answers, by lesson: DRAWN maps an exercise to (wrong answers with the mistake
each must be named by, right answers written other ways), joined to the sweep."""

from __future__ import annotations

from . import lesson03

DRAWN: dict[str, tuple[list, list]] = {}
for _module in (lesson03,):
    DRAWN.update(_module.DRAWN)
