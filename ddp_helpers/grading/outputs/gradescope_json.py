"""Gradescope's results.json for each submission (its autograder specification).

Each exercise is a test worth its points, with the check's message and hint as the
learner's own check shows them, and the mistake's key in its `extra_data`. An exercise
with the grader's extra cases gets a second test of 0 points for them, at the visibility
the instructor chooses (by default shown once grades are published); until then the
exercise's own test says only that the extra cases decided it. Their code is never in any
output. A notebook that did not run to its end (timeout, crash, a limit) gets a failed
"Notebook" test that says what happened.

Every output is declared plain text (`output_format`, `test_output_format`: Gradescope's
default, said outright) and holds no control character (escape.printable): what a learner's
code wrote shows as the text it is, never as HTML, Markdown or terminal colours.
"""

from __future__ import annotations

import json
from pathlib import Path

from ... import i18n
from ...exercises.verdicts import CheckStatus, Hidden
from ...files import replaced_whole
from ...i18n import messages
from ..defaults import DEFAULT_VISIBILITY, VISIBILITIES  # noqa: F401 - the tests read them here
from ..results import Row, Status
from ..words import FEEDBACK
from .escape import printable

MESSAGES = messages(
    "grading.gradescope",
    {
        "output": "Lesson {lesson}: {points} of {max_points} points. Status: {status}.",
        "invalid": "This file could not be graded: {problem}",
        "notebook": "Notebook",
        "submission": "Submission",
        "extra": "{id} {name}: the grader's extra cases",
        "decided_by_extra": (
            "The check in the notebook passes, but the grader's extra cases found a problem; "
            "they are shown when grades are published."
        ),
    },
)


def results_json(row: Row, hidden_visibility: str = DEFAULT_VISIBILITY) -> dict:
    """The results.json of one graded row, in the submission's language."""
    with i18n.using(row.submission.language):
        results = _results_json(row, hidden_visibility)
    for test in results["tests"]:
        test["output"] = printable(test["output"])
    results["output"] = printable(results["output"])
    return {**results, "output_format": "text", "test_output_format": "text"}


def _results_json(row: Row, hidden_visibility: str) -> dict:
    sub = row.submission
    seconds = round(row.seconds, 1)
    if row.status is Status.INVALID:
        return _invalid_results(sub.problem or "", seconds)
    tests = [t for ex in row.exercises for t in _exercise_tests(ex, hidden_visibility)]
    if row.status is not Status.OK:
        tests.insert(0, _notebook_test(row))
    return {
        "score": float(row.points),
        "execution_time": seconds,
        "output": MESSAGES["output"].format(
            lesson=sub.lesson,
            points=row.points,
            max_points=row.max_points,
            status=FEEDBACK["status_word"][row.status.value],
        ),
        "tests": tests,
    }


def _invalid_results(problem: str, seconds: float) -> dict:
    """The results.json of a file that could not be graded: 0 points, and why."""
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


def _exercise_tests(ex, hidden_visibility: str) -> list[dict]:
    """An exercise's test, worth its points; then a test of 0 points for its extra cases."""
    extra_failed = ex.hidden is Hidden.FAILED
    output = MESSAGES["decided_by_extra"] if extra_failed else ex.message
    if ex.hint and not extra_failed:
        output += "\n\n" + FEEDBACK["hint"].format(hint=ex.hint)
    tests = [
        {
            "name": ex.column,
            "number": ex.id,
            "score": float(ex.points),
            "max_score": float(ex.max),
            "status": "passed" if ex.status is CheckStatus.CORRECT else "failed",
            "output": output,
            "visibility": "visible",
            # The mistake's key (the CSV's too), for a script reading the results; until
            # grades are published, the extra cases' own is not told.
            "extra_data": {"mistake": None if extra_failed else ex.mistake},
        }
    ]
    if ex.hidden is not None:
        tests.append(
            {
                "name": MESSAGES["extra"].format(id=ex.id, name=ex.name),
                "score": 0.0,
                "max_score": 0.0,
                "status": ex.hidden,
                "output": ex.message if extra_failed else "",
                "visibility": hidden_visibility,
                "extra_data": {"mistake": ex.mistake if extra_failed else None},
            }
        )
    return tests


def _notebook_test(row: Row) -> dict:
    """The failed "Notebook" test of a notebook that did not run to its end: what happened."""
    text = [FEEDBACK["status"][row.status.value]]
    for e in row.events:
        if e.kind != "cell_error":
            text.append(e.text + (f"\n\n{e.detail}" if e.detail else ""))
    return {
        "name": MESSAGES["notebook"],
        "score": 0.0,
        "max_score": 0.0,
        "status": "failed",
        "output": "\n\n".join(text),
        "visibility": "visible",
    }


def write_results(row: Row, path: Path, hidden_visibility: str = DEFAULT_VISIBILITY) -> Path:
    """Write results.json at path (made whole, then moved into place)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with replaced_whole(path, encoding="utf-8") as f:
        f.write(json.dumps(results_json(row, hidden_visibility), indent=2))
    return path


def results_paths(folder: Path, names: dict[str, str]) -> dict[str, Path]:
    """Where each submission's results.json goes: folder/results.json for a batch of one
    (as Gradescope's run_autograder needs it), else folder/<its feedback name>/results.json."""
    if len(names) == 1:
        return {name: folder / "results.json" for name in names}
    return {
        name: folder / stem.removesuffix(".md") / "results.json" for name, stem in names.items()
    }
