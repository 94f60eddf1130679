"""A submitted notebook, read as the grader may read hostile bytes: bounded in size, JSON
values and width before it is parsed; its code cells, language and lesson. A data module:
the worker, Gradescope's run and the batch read notebooks here, none through another role."""

from __future__ import annotations

import json
import re
from pathlib import Path

from .. import i18n
from ..exercises import LESSONS
from ..files import TooBig, read_capped
from ..nbformat_quick import nbformat as _nbformat

MAX_NOTEBOOK = 64 << 20  # bytes of a submission read: a lesson with its outputs is ~1 MB
# Keys and values of a submission parsed (json_items). The course's own solved notebooks,
# outputs and all, hold at most 2,259 (solutions/ja/04); parsed, each costs the grader up to
# ~300 bytes (an empty object: 8 MiB of `{}` took it to 1.6 GB), so 500,000 costs at most
# ~150 MB, and a learner's notebook would need 200 times the outputs of a lesson to reach it.
MAX_ITEMS = 500_000
# Bytes of a notebook's text in the grader's memory: Python holds every character of a text
# in 1, 2 or 4 bytes, as its widest one needs, so that one emoji in 64 MiB of ASCII makes it
# 256 MiB (and the string parsed from it as much again).
MAX_TEXT = 2 * MAX_NOTEBOOK
_PAST_FFFF = re.compile(rb"[\xf0-\xf4]")  # what starts a character's 4 bytes in UTF-8
_CONTINUATIONS = bytes(range(0x80, 0xC0))  # the bytes that continue a character in UTF-8
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)  # a JSON string, escapes and all
_STARTS = (b"{", b"[", b",", b":")  # what each key or value follows, but the first

_IMPORT = re.compile(r"\bddp_helpers\.exercises(?:\s+import\s+|\.)lesson(\d\d)\b")
_IMPORT_AS_EX = re.compile(r"\bddp_helpers\.exercises\s+import\s+lesson(\d\d)\s+as\s+ex\b")

# Why a file is no notebook the grader reads, or names no lesson it has (the instructor's
# words; the row's problem).
PROBLEMS = {
    "not_notebook": (
        "This file is not a Jupyter notebook ({error}). Submit the .ipynb file you worked "
        "in (JupyterLab: File > Download)."
    ),
    "too_big": (
        "This file is {size} bytes, over the {limit} a notebook may be. Submit the .ipynb "
        "you worked in with its outputs cleared (Edit > Clear Outputs of All Cells)."
    ),
    "too_many_values": (
        "This notebook holds more than {limit:,} JSON values, more than the grader reads (a "
        "lesson with its outputs holds about 2,000): a notebook of that many costs the "
        "grader too much memory to read. Clear its outputs (Edit > Clear Outputs of All "
        "Cells), save it, and submit it again."
    ),
    "too_wide": (
        "This notebook's text takes {size:,} bytes of memory once read (a character past "
        "U+FFFF, such as an emoji, makes every character of it take 4), over the {limit:,} "
        "the grader reads. Clear its outputs (Edit > Clear Outputs of All Cells), save it, "
        "and submit it again."
    ),
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
}


class TooMuchToRead(ValueError):
    """A notebook whose parse would cost the grader more memory than it gives one: more
    values than MAX_ITEMS, or text past MAX_TEXT; `key` names its PROBLEMS."""

    def __init__(self, key: str, **fields):
        super().__init__(key)
        self.key, self.fields = key, fields


def json_items(data: bytes) -> int:
    """At most how many keys and values the JSON text `data` holds, counted without building
    them: one more than its `{ [ , :` outside strings, as each key or value starts the text
    or follows one of those. Past MAX_ITEMS the count stops (it is then above it)."""
    count = 1 + sum(map(data.count, _STARTS))
    if count <= MAX_ITEMS:
        return count  # the strings' own commas counted too: still at most that many
    count, end = 1, 0
    for number, string in enumerate(_STRING.finditer(data)):
        count += sum(data.count(start, end, string.start()) for start in _STARTS)
        end = string.end()
        if count > MAX_ITEMS or number > MAX_ITEMS:  # every string is a key or a value
            return max(count, number)
    return count + sum(data.count(start, end) for start in _STARTS)


def text_size(data: bytes) -> int:
    """At most the bytes Python holds UTF-8 `data` in once decoded, found without decoding:
    2 per byte at most, but 4 per character (a byte that does not continue one) as soon as
    one character is past U+FFFF (a 4-byte sequence)."""
    if len(data) * 4 > MAX_TEXT and _PAST_FFFF.search(data):
        return 4 * len(data.translate(None, _CONTINUATIONS))  # a copy, but one pass
    return 2 * len(data)


def _notebook_json(path) -> tuple[str, object]:
    """The text of the notebook file at path and its JSON; ValueError saying why not one.
    Read as files.py reads what a learner could have replaced: no link, a regular file, at
    most MAX_NOTEBOOK bytes (a hard link is read: the submissions are the instructor's
    folder); its values counted before any is built (TooManyValues past MAX_ITEMS), so that
    the grader's memory is bounded whatever the file holds; JSON nested past Python's
    recursion limit is not one either."""
    data = read_capped(path, MAX_NOTEBOOK, other_names=True)
    if json_items(data) > MAX_ITEMS:
        raise TooMuchToRead("too_many_values", limit=MAX_ITEMS)
    if text_size(data) > MAX_TEXT:
        raise TooMuchToRead("too_wide", size=text_size(data), limit=MAX_TEXT)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 text: {exc.reason}") from None
    del data
    try:
        return text, json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"broken JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    except RecursionError:
        raise ValueError("JSON nested deeper than any notebook") from None


def read_notebook(path):
    """The notebook at path, as nbformat v4, with what the grader reads of each cell (its
    type, source and id); raises ValueError saying why it is not one.

    The rest of a cell (its outputs, metadata, attachments) is neither kept nor validated:
    the grader runs the notebook again and reads none of it, and jsonschema's errors for
    thousands of bad values inside one cell (75 KB of `{}` as its outputs) took the grader
    to 1.3 GB.
    """
    nbformat = _nbformat()
    _, data = _notebook_json(path)
    try:
        nb = _v4(nbformat, data)
        nb.cells = [_graded_part(nbformat, cell) for cell in nb.cells]
        nbformat.validate(nb)
    except Exception as exc:  # noqa: BLE001 - nbformat raises many kinds; all mean "not one"
        said = str(getattr(exc, "message", None) or exc).strip()  # a message, not the cell
        first = said.splitlines()[0] if said else type(exc).__name__
        raise ValueError(f"not in Jupyter's notebook format: {first[:200]}") from None
    return nb


def _v4(nbformat, data):
    """The notebook's JSON as nbformat v4's NotebookNode, as nbformat.reads makes it (without
    parsing the text again, and without the validation it logs)."""
    from nbformat.reader import get_version

    major, minor = get_version(data)
    if major not in nbformat.versions:
        raise ValueError(f"unsupported nbformat version {major}")
    return nbformat.convert(nbformat.versions[major].to_notebook_json(data, minor=minor), 4)


def _graded_part(nbformat, cell):
    """A cell with only its type, source and id (what is not a cell is left, to be refused)."""
    if not isinstance(cell, dict):
        return cell
    part = {key: cell[key] for key in ("cell_type", "source", "id") if key in cell}
    part["metadata"] = {}
    if cell.get("cell_type") == "code":
        part.update(outputs=[], execution_count=None)
    return nbformat.from_dict(part)


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
    return lesson_and_language(path)[:2]


def lesson_and_language(path) -> tuple[str | None, str | None, str]:
    """lesson_of's answer and the language the notebook's metadata says (as the Japanese
    edition's do; English when it cannot be read), the file read once."""
    try:
        nb = read_notebook(path)
    except TooBig as exc:
        return None, PROBLEMS["too_big"].format(size=exc.size, limit=exc.limit), "en"
    except TooMuchToRead as exc:
        return None, PROBLEMS[exc.key].format(**exc.fields), "en"
    except (OSError, ValueError) as exc:
        return None, PROBLEMS["not_notebook"].format(error=exc), "en"
    return (*_lesson_in(nb, path), _language(nb.metadata.get("language")))


def _lesson_in(nb, path) -> tuple[str | None, str | None]:
    """(lesson, None) for a lesson notebook, or (lesson or None, why it is invalid)."""
    found = sorted(
        {m for c in nb.cells if c.cell_type == "code" for m in _IMPORT.findall(c.source)}
    )
    if not found:
        return None, PROBLEMS["no_lesson"]
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
            return None, PROBLEMS["many_lessons"].format(lessons=", ".join(found))
        found = chosen
    lesson = found[0]
    if lesson not in LESSONS:
        return None, PROBLEMS["unknown_lesson"].format(lesson=lesson)
    if named and lesson not in named:
        return lesson, PROBLEMS["name_mismatch"].format(named=named[0], found=lesson)
    return lesson, None
