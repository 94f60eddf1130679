"""The submissions of a batch: notebooks found in the paths given, each with its lesson or
why it cannot be graded."""

from __future__ import annotations

import dataclasses
import os
import re
from collections import Counter
from pathlib import Path

from ...paths import ROOT
from ..notebooks import lesson_and_language
from ..results import Submission
from . import finding

INSTRUCTOR_TEXT = {
    "no_path": "No such file or folder: {path}. Give notebooks or folders of them.",
    "no_notebooks": (
        "No notebooks (*.ipynb) found in {paths}. Give the folder the submissions were "
        "collected into, or the notebook files themselves."
    ),
    "unreadable": "The grader could not read this file: {error}.",
    "wrong_lesson": (
        "Wrong lesson: this is lesson {found}'s notebook but lesson {wanted} was asked for."
    ),
    "bad_pattern": (
        "--student-from takes a Python regular expression searched in each submission's "
        "path, with a group named student or a first group for the student's name or ID "
        "(for files named like alice_01_rank_and_world_size.ipynb: "
        "'(?P<student>[^/_]+)_[^/]*$'); {pattern!r} is not one: {error}."
    ),
}


class GradingError(Exception):
    """Bad input to the grader as a whole (no such path, no notebooks)."""


def find_submissions(
    paths, lesson: str | None = None, student_from: re.Pattern | None = None
) -> list[Submission]:
    """Every notebook in paths (folders searched), each with its lesson or why it is invalid,
    and its student (see student_of): a row for every file, whatever it holds, and for every
    path that could not be read (finding.py).

    Nothing in a folder is followed through a symbolic link: a notebook or a folder that is
    one gets a row of its own that says so (a link to another learner's notebook would give
    one learner's work two rows and the other none; to the solutions, full marks). A folder
    given is searched as given, a link too (it is the instructor's); a notebook given is
    refused for a link anywhere on its path below the working folder, as a glob may have put
    a learner's link there (finding.link_on_the_way). One file found under two names is
    graded once (finding.one_row_per_file); one that is the course's solved notebook is
    named as such.
    """
    found: dict[str, tuple[str, str | None, str | None]] = {}  # where -> (shown, folder, why)
    for given in paths:
        path = str(given)
        if os.path.isdir(path):
            for where, folder, problem in finding.walk(path):
                found.setdefault(where, (finding.shown_name(where), folder, problem))
        elif os.path.lexists(path):
            where = os.path.abspath(path)
            found.setdefault(where, (finding.shown_name(where), None, finding.given_file(path)))
        else:
            raise GradingError(INSTRUCTOR_TEXT["no_path"].format(path=given))
    if not found:
        raise GradingError(INSTRUCTOR_TEXT["no_notebooks"].format(paths=", ".join(map(str, paths))))
    finding.one_row_per_file(found)
    copies = finding.CourseCopies(finding.course_notebooks(ROOT), ROOT)
    subs = []
    for where, (shown, folder, problem) in sorted(found.items(), key=lambda item: item[1]):
        student = student_of(shown, student_from) if student_from is not None else folder
        student = finding.readable(student) if student is not None else None
        sub = _submission(Path(where), shown, problem, lesson, student)
        if sub.problem is None:
            sub = dataclasses.replace(sub, course_copy=copies.of(where))
        subs.append(sub)
    return _students_from_folders(subs)


def _submission(path: Path, shown: str, problem, wanted, student) -> Submission:
    """One file's row-to-be: its lesson and language, or why it cannot be graded; whatever
    the file holds, never an exception (one file never stops the batch)."""
    if problem is not None:
        return Submission(path, shown, None, problem, student)
    try:
        found, problem, language = lesson_and_language(path)
    except Exception as exc:  # noqa: BLE001 - what a file holds is its own row's problem
        error = f"{type(exc).__name__}: {exc}"[:300]
        return Submission(
            path, shown, None, INSTRUCTOR_TEXT["unreadable"].format(error=error), student
        )
    if problem is None and wanted is not None and found != wanted:
        problem = INSTRUCTOR_TEXT["wrong_lesson"].format(found=found, wanted=wanted)
    return Submission(path, shown, found, problem, student, language)


def _students_from_folders(subs: list[Submission]) -> list[Submission]:
    """Students not yet known (None): the folder each notebook is in, as for `subs/alice`
    or a glob `subs/*/01_*.ipynb`; but a folder holding the same lesson twice is a flat
    collection of many learners: '' (--student-from can tell them apart)."""

    def folder(sub: Submission) -> str:
        parent = sub.path.parent
        return "" if parent == Path.cwd().resolve() else finding.readable(parent.name)

    seen = Counter((sub.path.parent, sub.lesson) for sub in subs if sub.student is None)
    return [
        dataclasses.replace(
            sub, student=folder(sub) if seen[(sub.path.parent, sub.lesson)] == 1 else ""
        )
        if sub.student is None
        else sub
        for sub in subs
    ]


def student_of(shown: str, pattern: re.Pattern) -> str:
    """The student a --student-from pattern finds in a submission's path ('' if none):
    its group named `student`, else its first group, else what it matched."""
    m = pattern.search(Path(shown).as_posix())
    if m is None:
        return ""
    if "student" in pattern.groupindex:
        return m.group("student") or ""
    return (m.group(1) if pattern.groups else m.group(0)) or ""


def student_pattern(text: str) -> re.Pattern:
    """--student-from, compiled; a ValueError that says what is expected."""
    try:
        return re.compile(text)
    except re.error as exc:
        raise ValueError(INSTRUCTOR_TEXT["bad_pattern"].format(pattern=text, error=exc)) from None
