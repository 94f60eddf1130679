"""What a batch would write, checked against what it grades before anything is graded: the
grader never writes onto a submission, whatever the paths given (a learner's file named
`--out=alice.ipynb` that a glob made the CSV's path, a link or a hard link put where an
output goes)."""

from __future__ import annotations

import os
from pathlib import Path

from ..outputs.gradescope_json import results_paths
from ..outputs.reports import feedback_names
from ..results import Submission
from .submissions import GradingError

INSTRUCTOR_TEXT = {
    "collision": (
        "{output} ({what}) is {how} the submission {submission}, so writing it would replace "
        "that learner's notebook. Give {option} a path of its own, away from the submissions "
        "(an output folder may hold notebooks: only a file of the same name is a clash), and "
        "grade again. Nothing was graded or written."
    ),
}


def refuse_overwrites(subs: list[Submission], options) -> None:
    """GradingError, before anything is graded or written, if a file the batch would write or
    a folder it would make is one of the submissions: the same file (the same st_dev and
    st_ino, through a link of either kind) where it exists, the same resolved path where it
    does not. `options`: the batch's GradeOptions."""
    found = _identities(subs)
    for option, what, path in written_paths(subs, options):
        for key in _keys(path):
            if key in found:
                sub, how = found[key], "the same file as" if key[0] == "file" else "the path of"
                raise GradingError(
                    INSTRUCTOR_TEXT["collision"].format(
                        output=path, what=what, how=how, submission=sub.name, option=option
                    )
                )


def written_paths(subs: list[Submission], options) -> list[tuple[str, str, Path]]:
    """(option, what it is, path) of every file the batch would write (each with the
    `.tmp` it is first written to: files.replaced_whole) and every folder it would make."""
    names = feedback_names(subs)
    files: list[tuple[str, str, Path]] = [("--out", "the CSV of grades", Path(options.out))]
    if options.feedback is not None:
        folder = Path(options.feedback)
        files += [("--feedback", "a feedback file", folder / name) for name in names.values()]
    if options.gradescope is not None:
        folder = Path(options.gradescope)
        files += [
            ("--gradescope", "a results.json", path)
            for path in results_paths(folder, names).values()
        ]
    if options.report is not None:
        files.append(("--report", "the class report", Path(options.report)))
    written = []
    for option, what, path in files:
        written += [(option, what, path), (option, what, path.with_name(path.name + ".tmp"))]
        written.append((option, "a folder it makes", path.parent))
    return written


def _identities(subs: list[Submission]) -> dict[tuple, Submission]:
    """Each submission by every key that names its file: ('file', st_dev, st_ino) of the
    path and of what it points to where it is a link, ('path', its resolved path)."""
    found: dict[tuple, Submission] = {}
    for sub in subs:
        if os.path.isdir(sub.path):  # a row for a folder (a link, unreadable): written into,
            continue  # never over
        for key in _keys(sub.path):
            found.setdefault(key, sub)
    return found


def _keys(path) -> list[tuple]:
    keys = [("path", os.path.realpath(path))]
    for follow in (False, True):
        try:
            info = os.stat(path, follow_symlinks=follow)
        except (OSError, ValueError):
            continue
        keys.append(("file", info.st_dev, info.st_ino))
    return keys
