"""In Gradescope's container, once per submission: run_autograder calls `python -m
ddp_helpers.grading.gradescope run`, which picks the submitted notebook and grades it into
/autograder/results/results.json."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from ...exercises import notebook_name
from ..defaults import DEFAULT_OUT
from .config import SKIP, read_config

INSTRUCTOR_TEXT = {
    "no_notebook": (
        "No notebook (.ipynb) was submitted{found}. Submit lesson {lesson}'s notebook, "
        "{notebook} (JupyterLab: File > Download), as a file of its own."
    ),
    "found": " (the submission holds {files})",
    "several": (
        "{count} notebooks were submitted ({files}), and none of them is lesson {lesson}'s "
        "alone. Submit only lesson {lesson}'s notebook, {notebook}."
    ),
}


def _listed(paths: list[Path], folder: Path) -> str:
    names = [p.relative_to(folder).as_posix() for p in paths[:8]]
    return ", ".join(names) + (f" and {len(paths) - 8} more" if len(paths) > 8 else "")


def pick_notebook(folder: Path, lesson: str) -> tuple[Path | None, str | None]:
    """(the notebook to grade, None) or (None, why there is none to grade)."""
    from ..notebooks import lesson_of

    files = sorted(
        p
        for p in (folder.rglob("*") if folder.is_dir() else ())
        if p.is_file() and not any(part in SKIP for part in p.relative_to(folder).parts)
    )
    notebooks = [p for p in files if p.suffix.lower() == ".ipynb"]
    words = {"lesson": lesson, "notebook": notebook_name(lesson)}
    if not notebooks:
        found = INSTRUCTOR_TEXT["found"].format(files=_listed(files, folder)) if files else ""
        return None, INSTRUCTOR_TEXT["no_notebook"].format(found=found, **words)
    if len(notebooks) == 1:
        return notebooks[0], None
    for pick in (
        [p for p in notebooks if p.name == words["notebook"]],
        [p for p in notebooks if lesson_of(p) == (lesson, None)],
    ):
        if len(pick) == 1:
            return pick[0], None
    files = _listed(notebooks, folder)
    return None, INSTRUCTOR_TEXT["several"].format(count=len(notebooks), files=files, **words)


def run(root: Path) -> int:
    """Grade root/submission into root/results/results.json; 0, or 2 with the error said."""
    from ..api import run_batch
    from ..budget import TimeBudget
    from ..confinement.sandbox import ConfinementRequest
    from ..orchestration.batch import GradeOptions
    from ..orchestration.submissions import GradingError
    from ..outputs.gradescope_json import write_results
    from ..results import Row, Submission

    # The platform's own folders, links resolved: the grader refuses a notebook given with a
    # link on its path (as a glob could put a learner's there), and only submission/ is the
    # learner's.
    root = Path(os.path.realpath(root))
    source, results = root / "source", root / "results"
    config = read_config(source)
    results.mkdir(parents=True, exist_ok=True)
    (results / "results.json").unlink(missing_ok=True)  # only this run's verdict counts
    notebook, problem = pick_notebook(root / "submission", config["lesson"])
    if notebook is None:
        sub = Submission(root / "submission", "submission", None, problem)
        write_results(Row.invalid(sub), results / "results.json")
        print(f"invalid: {problem}", file=sys.stderr)
        return 0
    with tempfile.TemporaryDirectory(prefix="ddp-autograder-") as tmp:
        options = GradeOptions(
            out=os.path.join(tmp, DEFAULT_OUT),
            budget=TimeBudget(notebook=float(config["timeout"])),
            lesson=config["lesson"],
            gradescope=results,
            hidden_visibility=config["hidden_visibility"],
            request=ConfinementRequest(sandbox=False),  # Gradescope's container is the sandbox
        )
        try:
            run_batch([str(notebook)], options)
        except (GradingError, OSError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            return 130
    return 0
