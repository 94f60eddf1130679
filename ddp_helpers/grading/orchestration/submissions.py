"""The submissions of a batch: notebooks found in the paths given, each with its lesson or
why it cannot be graded."""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from pathlib import Path

from ... import i18n
from ...exercises import LESSONS, exercises_of
from ...files import TooBig, read_capped
from ..results import Submission

MAX_NOTEBOOK = 64 << 20  # bytes of a submission read: a lesson with its outputs is ~1 MB

_IMPORT = re.compile(r"\bddp_helpers\.exercises(?:\s+import\s+|\.)lesson(\d\d)\b")
_IMPORT_AS_EX = re.compile(r"\bddp_helpers\.exercises\s+import\s+lesson(\d\d)\s+as\s+ex\b")

# Instructor- and learner-facing text of this module, in one place for translation.
INSTRUCTOR_TEXT = {
    "no_path": "No such file or folder: {path}. Give notebooks or folders of them.",
    "no_notebooks": (
        "No notebooks (*.ipynb) found in {paths}. Give the folder the submissions were "
        "collected into, or the notebook files themselves."
    ),
    "not_notebook": (
        "This file is not a Jupyter notebook ({error}). Submit the .ipynb file you worked "
        "in (JupyterLab: File > Download)."
    ),
    "link": (
        "This is a symbolic link (to {target}), not a file handed in: the grader follows no "
        "link among the submissions, so that none can stand for another learner's work or "
        "the course's. Collect the notebook file itself."
    ),
    "link_folder": (
        "This folder is a symbolic link (to {target}), not a folder handed in: the grader "
        "follows no link among the submissions. Collect the notebooks themselves."
    ),
    "too_big": (
        "This file is {size} bytes, over the {limit} a notebook may be. Submit the .ipynb "
        "you worked in with its outputs cleared (Edit > Clear Outputs of All Cells)."
    ),
    "unreadable": "The grader could not read this file: {error}.",
    "no_lesson": (
        "This notebook is not one of the course's lessons: no cell imports the checks "
        "(`from ddp_helpers.exercises import lessonNN as ex`). Submit the lesson notebook "
        "you worked in."
    ),
    "many_lessons": (
        "This notebook imports the checks of several lessons ({lessons}) and neither its "
        "`... import lessonNN as ex` line nor its file name says which lesson it is; "
        "submit one lesson per notebook."
    ),
    "unknown_lesson": "This notebook imports lesson {lesson}, which this course does not have.",
    "name_mismatch": (
        "Wrong lesson: the file is named like lesson {named} but holds lesson {found}'s "
        "notebook. Submit lesson {named}'s notebook under this name."
    ),
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


def _notebook_json(path) -> tuple[str, object]:
    """The text of the notebook file at path and its JSON; ValueError saying why not one.
    Read as files.py reads what a learner could have replaced: no link, a regular file, at
    most MAX_NOTEBOOK bytes; JSON nested past Python's recursion limit is not one either."""
    try:
        text = read_capped(path, MAX_NOTEBOOK, other_names=True).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 text: {exc.reason}") from None
    try:
        return text, json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"broken JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    except RecursionError:
        raise ValueError("JSON nested deeper than any notebook") from None


def read_notebook(path):
    """The notebook at path, as nbformat v4; raises ValueError saying why it is not one."""
    from ...nbformat_quick import nbformat as _nbformat

    nbformat = _nbformat()
    text, _ = _notebook_json(path)
    try:
        nb = nbformat.reads(text, as_version=4)
        nbformat.validate(nb)
    except Exception as exc:  # noqa: BLE001 - nbformat raises many kinds; all mean "not one"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"not in Jupyter's notebook format: {first[:200]}") from None
    return nb


def code_sources(path) -> list[str]:
    """The code cells' sources of a notebook the batch has already found valid.

    Read as plain JSON where it is format 4: importing nbformat costs a worker about 1.7 s
    of CPU (jsonschema's format checkers), per submission.
    """
    _, data = _notebook_json(path)
    if data.get("nbformat") != 4:
        return [c.source for c in read_notebook(path).cells if c.cell_type == "code"]
    sources = []
    for cell in data.get("cells", []):
        if cell.get("cell_type") == "code":
            source = cell.get("source", "")
            sources.append(source if isinstance(source, str) else "".join(source))
    return sources


def language_of(path) -> str:
    """The language a notebook says it is in (its metadata), read alone, for the worker,
    which has the path only; lesson_of gives it with the lesson."""
    try:
        metadata = _notebook_json(path)[1].get("metadata", {})
        return _language(metadata.get("language"))
    except (OSError, ValueError, AttributeError):
        return "en"


def _language(said) -> str:
    """English when a notebook says no language, or one the course does not have."""
    return (i18n.normalize(said) if isinstance(said, str) else None) or "en"


def lesson_of(path) -> tuple[str | None, str | None]:
    """(lesson, None) for a lesson notebook, or (lesson or None, why it is invalid)."""
    return _lesson_and_language(path)[:2]


def _lesson_and_language(path) -> tuple[str | None, str | None, str]:
    """lesson_of's answer and the language the notebook's metadata says (as the Japanese
    edition's do; English when it cannot be read), the file read once."""
    try:
        nb = read_notebook(path)
    except TooBig as exc:
        return None, INSTRUCTOR_TEXT["too_big"].format(size=exc.size, limit=exc.limit), "en"
    except (OSError, ValueError) as exc:
        return None, INSTRUCTOR_TEXT["not_notebook"].format(error=exc), "en"
    return (*_lesson_in(nb, path), _language(nb.metadata.get("language")))


def _lesson_in(nb, path) -> tuple[str | None, str | None]:
    """(lesson, None) for a lesson notebook, or (lesson or None, why it is invalid)."""
    found = sorted(
        {m for c in nb.cells if c.cell_type == "code" for m in _IMPORT.findall(c.source)}
    )
    if not found:
        return None, INSTRUCTOR_TEXT["no_lesson"]
    # A file named like one of the course's notebooks must hold that lesson.
    named = [n for n, slug in LESSONS.items() if slug in Path(path).name]
    if len(found) > 1:
        # A lesson may import another's checks (to run an old one again): the lesson is
        # the one imported `as ex`, as every lesson does, or else the one its name says.
        as_ex = sorted(
            {m for c in nb.cells if c.cell_type == "code" for m in _IMPORT_AS_EX.findall(c.source)}
        )
        chosen = as_ex if len(as_ex) == 1 else [n for n in named if n in found]
        if len(chosen) != 1:
            return None, INSTRUCTOR_TEXT["many_lessons"].format(lessons=", ".join(found))
        found = chosen
    lesson = found[0]
    if lesson not in LESSONS:
        return None, INSTRUCTOR_TEXT["unknown_lesson"].format(lesson=lesson)
    if named and lesson not in named:
        return lesson, INSTRUCTOR_TEXT["name_mismatch"].format(named=named[0], found=lesson)
    return lesson, None


def find_submissions(
    paths, lesson: str | None = None, student_from: re.Pattern | None = None
) -> list[Submission]:
    """Every notebook in paths (folders searched), each with its lesson or why it is invalid,
    and its student (see student_of): a row for every file, whatever it holds.

    Nothing in a folder is followed through a symbolic link: a notebook or a folder that is
    one gets a row of its own that says so (a link to another learner's notebook would give
    one learner's work two rows and the other none; to the solutions, full marks). A path
    given is searched as given, a link among them too (it is the instructor's), but a
    notebook given that is a link, or lies in a folder that is one, is refused as well.
    """
    found: dict[str, tuple[str, str | None, str | None]] = {}  # where -> (shown, folder, why)
    for given in paths:
        path = str(given)
        if os.path.isdir(path):
            for where, folder, problem in _walk(path):
                found.setdefault(where, (_shown(where), folder, problem))
        elif os.path.isfile(path) or os.path.islink(path):
            where = os.path.abspath(path)
            found.setdefault(where, (_shown(where), None, _linked(path)))
        else:
            raise GradingError(INSTRUCTOR_TEXT["no_path"].format(path=given))
    if not found:
        raise GradingError(INSTRUCTOR_TEXT["no_notebooks"].format(paths=", ".join(map(str, paths))))
    subs = []
    for where, (shown, folder, problem) in sorted(found.items(), key=lambda item: item[1]):
        student = student_of(shown, student_from) if student_from is not None else folder
        subs.append(_submission(Path(where), shown, problem, lesson, student))
    return _students_from_folders(subs)


def _submission(path: Path, shown: str, problem, wanted, student) -> Submission:
    """One file's row-to-be: its lesson and language, or why it cannot be graded; whatever
    the file holds, never an exception (one file never stops the batch)."""
    if problem is not None:
        return Submission(path, shown, None, problem, student)
    try:
        found, problem, language = _lesson_and_language(path)
    except Exception as exc:  # noqa: BLE001 - what a file holds is its own row's problem
        error = f"{type(exc).__name__}: {exc}"[:300]
        return Submission(
            path, shown, None, INSTRUCTOR_TEXT["unreadable"].format(error=error), student
        )
    if problem is None and wanted is not None and found != wanted:
        problem = INSTRUCTOR_TEXT["wrong_lesson"].format(found=found, wanted=wanted)
    return Submission(path, shown, found, problem, student, language)


def _walk(top: str):
    """(absolute path, the first folder under top or None, why refused or None) of each
    notebook under top, and of each link that stands where a notebook or a folder would;
    no link followed, checkpoints skipped."""
    top = os.path.abspath(top)
    for folder, dirs, files in os.walk(top, followlinks=False):
        dirs[:] = sorted(d for d in dirs if d != ".ipynb_checkpoints")
        first = os.path.relpath(folder, top).split(os.sep)[0]
        first = None if first == "." else first
        for name in list(dirs):
            where = os.path.join(folder, name)
            if os.path.islink(where):  # os.walk lists it, and does not go in
                dirs.remove(name)
                target = os.readlink(where)
                problem = INSTRUCTOR_TEXT["link_folder"].format(target=target)
                yield where, first or name, problem
        for name in sorted(files):
            where = os.path.join(folder, name)
            if name.endswith(".ipynb"):
                yield where, first, _linked(where)


def _linked(path: str) -> str | None:
    """Why a notebook is refused for being a symbolic link, or lying in a folder that is
    one (as a glob over the learners' folders finds it); None if it is neither."""
    for where in (path, os.path.dirname(path)):
        if where and os.path.islink(where):
            key = "link" if where == path else "link_folder"
            return INSTRUCTOR_TEXT[key].format(target=os.readlink(where))
    return None


def _students_from_folders(subs: list[Submission]) -> list[Submission]:
    """Students not yet known (None): the folder each notebook is in, as for `subs/alice`
    or a glob `subs/*/01_*.ipynb`; but a folder holding the same lesson twice is a flat
    collection of many learners: '' (--student-from can tell them apart)."""
    import dataclasses

    def folder(sub: Submission) -> str:
        parent = sub.path.parent
        return "" if parent == Path.cwd().resolve() else parent.name

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


def _shown(path: str) -> str:
    """A submission's name: its path relative to the working folder when it is below it,
    else absolute; never resolved through a link (a link stands for itself)."""
    relative = os.path.relpath(path, os.getcwd())
    return path if relative == ".." or relative.startswith(".." + os.sep) else relative


def columns_for(subs: list[Submission]) -> list[tuple[str, str]]:
    """(lesson, column name) of every exercise of the lessons in the batch, in order."""
    lessons = sorted({s.lesson for s in subs if s.lesson and s.problem is None})
    return [(lesson, f"{ex.id} {ex.name}") for lesson in lessons for ex in exercises_of(lesson)]
