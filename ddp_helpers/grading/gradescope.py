"""Gradescope's results.json for each submission (its autograder specification).

Each exercise is a test worth its points, with the check's message and hint as the
learner's own check shows them. An exercise with the grader's extra cases gets a second
test of 0 points for them, at the visibility the instructor chooses (by default shown
once grades are published); until then the exercise's own test says only that the extra
cases decided it. Their code is never in any output. A notebook that did not run to its
end (timeout, crash, a limit) gets a failed "Notebook" test that says what happened.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .results import Row, Status

VISIBILITIES = ("hidden", "after_due_date", "after_published", "visible")

MESSAGES = {
    "output": "Lesson {lesson}: {points} of {max_points} points. Status: {status}.",
    "invalid": "This file could not be graded: {problem}",
    "notebook": "Notebook",
    "submission": "Submission",
    "extra": "{id} {name}: the grader's extra cases",
    "decided_by_extra": (
        "The check in the notebook passes, but the grader's extra cases found a problem; "
        "they are shown when grades are published."
    ),
}


def results_json(row: Row, hidden_visibility: str = "after_published") -> dict:
    """The results.json of one graded row."""
    from .reports import MESSAGES as REPORT_MESSAGES

    sub = row.submission
    seconds = round(row.seconds, 1)
    if row.status is Status.INVALID:
        problem = sub.problem or ""
        return {
            "score": 0.0,
            "execution_time": seconds,
            "output": MESSAGES["invalid"].format(problem=problem),
            "tests": [
                {
                    "name": MESSAGES["submission"],
                    "score": 0.0,
                    "max_score": 0.0,
                    "status": "failed",
                    "output": problem,
                    "visibility": "visible",
                }
            ],
        }
    tests = []
    for ex in row.exercises:
        extra_failed = ex.hidden == "failed"
        output = MESSAGES["decided_by_extra"] if extra_failed else ex.message
        if ex.hint and not extra_failed:
            output += "\n\n" + REPORT_MESSAGES["feedback"]["hint"].format(hint=ex.hint)
        tests.append(
            {
                "name": ex.column,
                "number": ex.id,
                "score": float(ex.points),
                "max_score": float(ex.max),
                "status": "passed" if ex.status == "correct" else "failed",
                "output": output,
                "visibility": "visible",
            }
        )
        if ex.hidden is not None:
            tests.append(
                {
                    "name": MESSAGES["extra"].format(id=ex.id, name=ex.name),
                    "score": 0.0,
                    "max_score": 0.0,
                    "status": ex.hidden,
                    "output": ex.message if extra_failed else "",
                    "visibility": hidden_visibility,
                }
            )
    happened = [e for e in row.events if e.kind != "cell_error"]
    if row.status is not Status.OK:
        text = [REPORT_MESSAGES["feedback"]["status"][row.status.value]]
        for e in happened:
            text.append(e.text + (f"\n\n{e.detail}" if e.detail else ""))
        tests.insert(
            0,
            {
                "name": MESSAGES["notebook"],
                "score": 0.0,
                "max_score": 0.0,
                "status": "failed",
                "output": "\n\n".join(text),
                "visibility": "visible",
            },
        )
    return {
        "score": float(row.points),
        "execution_time": seconds,
        "output": MESSAGES["output"].format(
            lesson=sub.lesson,
            points=row.points,
            max_points=row.max_points,
            status=row.status.value,
        ),
        "tests": tests,
    }


def write_results(row: Row, path: Path, hidden_visibility: str = "after_published") -> Path:
    """Write results.json at path (made whole, then moved into place)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(results_json(row, hidden_visibility), indent=2), encoding="utf-8")
    os.replace(tmp, path)
    return path


def results_paths(folder: Path, names: dict[str, str]) -> dict[str, Path]:
    """Where each submission's results.json goes: folder/results.json for a batch of one
    (as Gradescope's run_autograder needs it), else folder/<its feedback name>/results.json."""
    if len(names) == 1:
        return {name: folder / "results.json" for name in names}
    return {
        name: folder / stem.removesuffix(".md") / "results.json" for name, stem in names.items()
    }
