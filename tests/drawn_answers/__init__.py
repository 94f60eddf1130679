"""Issue 49's answers, one module per exercise (ex_3_2.py, ...): each module's DRAWN maps
its exercise to (wrong answers with the mistake each must be named by, right answers
written other ways); DRAWN here joins them, and tests/exercises/test_answers.py joins them
to its sweep."""

from __future__ import annotations

import importlib
import pkgutil

DRAWN: dict[str, tuple[list, list]] = {}
for _info in pkgutil.iter_modules(__path__):
    DRAWN.update(importlib.import_module(f"{__name__}.{_info.name}").DRAWN)
