"""Translated editions: solutions/<lang>/ made from the English solutions and i18n/<lang>/.

A translation is a JSON file per lesson, `i18n/<lang>/NN_name.json`, by cell id:
- every markdown cell of the English solution: `{"translates": H, "text": ...}`, where H is
  the hash of the English text it translates;
- a code cell whose comments and printed words are translated: `{"translates": H, "code":
  ...}`, H the hash of the English code. The code may differ from the English in comments and
  in the strings it translates, nothing else (`same_code`), and keeps the solution markers;
- a cell of the edition alone (a まとめ): a new id, `{"after": ID, "text": ...}`, placed after
  the cell ID.
`build` writes `solutions/<lang>/NN_name.ipynb`: the English notebook's cells with their
words in that language (a code cell without an entry is the English one; outputs are kept
from the translated notebook's own last run while its code is unchanged), the notebook's
language in its metadata. When an English cell changes, its hash no longer matches, and
`build --check` names the cell until its translation is redone; a translated code cell that
does more than translate is named too, and the English code is used until it is fixed.
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from ..nbformat_quick import nbformat as _nbformat
from ..paths import ROOT
from .same_code import differences

EDITIONS = ("ja",)
META = "ddp_basics"

AUTHOR_TEXT = {
    "no_translation": (
        "i18n/{lang}/{stem}.json has no translation of cell {cell} of solutions/{name}: "
        "translate it, with the hash of the English text (`python -m "
        "ddp_helpers.authoring.translations {name}` prints each cell's), and build again."
    ),
    "drift": (
        "solutions/{name}, cell {cell}: the English text changed after it was translated "
        "(i18n/{lang}/{stem}.json records {old}, the cell now hashes to {new}): update the "
        "translation and its `translates` hash."
    ),
    "orphan": (
        "i18n/{lang}/{stem}.json translates cell {cell}, which solutions/{name} no longer "
        "has as a {kind} cell: delete that entry."
    ),
    "code_drift": (
        "solutions/{name}, cell {cell}: the English code changed after it was translated "
        "(i18n/{lang}/{stem}.json records {old}, the code now hashes to {new}): translate "
        "the new code and update its `translates` hash (the English code runs meanwhile)."
    ),
    "not_a_translation": (
        "i18n/{lang}/{stem}.json, cell {cell}: the translated code {problem}. Translate only "
        "its comments and the strings it prints (the English code runs meanwhile)."
    ),
    "no_anchor": (
        "i18n/{lang}/{stem}.json, cell {cell} of the edition alone: solutions/{name} has no "
        "cell {after} to follow: name a cell it has."
    ),
    "missing": "i18n/{lang}/{stem}.json is missing: solutions/{name} has no {lang} edition.",
}


def text_hash(text: str) -> str:
    """The hash that ties a translation to the English text it was made from."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


@dataclass
class Edition:
    """One lesson in one language: the notebook to write, and what is out of step."""

    notebook: object
    problems: list[str]


def translation_path(root: Path, lang: str, name: str) -> Path:
    return root / "i18n" / lang / (Path(name).stem + ".json")


def make_edition(english, name: str, lang: str, root: Path, previous=None) -> Edition:
    """The `lang` edition of an English solution notebook (`previous`: the one on disk)."""
    path = translation_path(root, lang, name)
    where = {"lang": lang, "stem": path.stem, "name": name}
    if not path.exists():
        return Edition(None, [AUTHOR_TEXT["missing"].format(**where)])
    entries = json.loads(path.read_text(encoding="utf-8"))
    outputs = _outputs_by_id(previous)
    problems: list[str] = []
    nb = copy.deepcopy(english)
    for cell in nb.cells:
        meta = cell.metadata.setdefault(META, {})
        meta["translates"] = text_hash(cell.source)
        if cell.cell_type == "code":
            entry = entries.get(cell.get("id"))
            if entry is not None and "code" in entry:
                problems += _translate_code(cell, entry, where)
            kept = outputs.get(cell.get("id"))
            if kept is not None and kept[0] == cell.source:
                cell.outputs, cell.execution_count = kept[1], kept[2]
            else:  # never the English run's words in this edition: none until it runs here
                cell.outputs, cell.execution_count = [], None
            continue
        if cell.cell_type != "markdown":
            continue
        entry = entries.get(cell.get("id"))
        if entry is None or "text" not in entry:  # (a code entry here is named an orphan)
            problems.append(AUTHOR_TEXT["no_translation"].format(cell=cell.get("id"), **where))
            continue
        if entry["translates"] != meta["translates"]:
            problems.append(
                AUTHOR_TEXT["drift"].format(
                    cell=cell.get("id"), old=entry["translates"], new=meta["translates"], **where
                )
            )
            meta["translates"] = entry["translates"]  # what the text really translates
        cell.source = entry["text"]
    for cell, entry in entries.items():
        kind = "code" if "code" in entry else "markdown"
        if "after" not in entry and cell not in _ids(nb, kind):
            problems.append(AUTHOR_TEXT["orphan"].format(cell=cell, kind=kind, **where))
    problems += _add_own_cells(nb, entries, where)
    nb.metadata["language"] = lang
    return Edition(nb, problems)


def _ids(nb, kind: str) -> set:
    return {cell.get("id") for cell in nb.cells if cell.cell_type == kind}


def _translate_code(cell, entry: dict, where: dict) -> list[str]:
    """The cell's code in the edition's language, if it is only a translation (problems)."""
    here = {"cell": cell.get("id"), **where}
    if entry["translates"] != cell.metadata[META]["translates"]:
        new = cell.metadata[META]["translates"]
        return [AUTHOR_TEXT["code_drift"].format(old=entry["translates"], new=new, **here)]
    found = differences(cell.source, entry["code"])
    if found:
        return [AUTHOR_TEXT["not_a_translation"].format(problem=p, **here) for p in found]
    cell.source = entry["code"]
    return []


def _add_own_cells(nb, entries: dict, where: dict) -> list[str]:
    """The edition's own markdown cells, each after the cell it names."""
    problems = []
    for cell_id, entry in entries.items():
        if "after" not in entry:
            continue
        at = next((i for i, c in enumerate(nb.cells) if c.get("id") == entry["after"]), None)
        if at is None:
            problems.append(
                AUTHOR_TEXT["no_anchor"].format(cell=cell_id, after=entry["after"], **where)
            )
            continue
        cell = _nbformat().v4.new_markdown_cell(entry["text"])
        cell["id"] = cell_id
        cell.metadata[META] = {"edition_only": True}
        nb.cells.insert(at + 1, cell)
    return problems


def _outputs_by_id(nb) -> dict:
    if nb is None:
        return {}
    return {
        c.get("id"): (c.source, c.get("outputs", []), c.get("execution_count"))
        for c in nb.cells
        if c.cell_type == "code"
    }


def hashes(english, kind: str = "markdown") -> dict[str, str]:
    """Each cell's id and hash (markdown or code cells): what a translator records in
    `translates`."""
    return {c.get("id"): text_hash(c.source) for c in english.cells if c.cell_type == kind}


def main(argv: list[str] | None = None) -> None:
    """Print the id, kind and hash of each cell of the English solutions named."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m ddp_helpers.authoring.translations",
        description="each cell's id, kind and hash, for a translation's `translates`",
    )
    parser.add_argument("notebooks", nargs="+", metavar="NN_name.ipynb")
    for name in parser.parse_args(argv).notebooks:
        path = ROOT / "solutions" / Path(name).name
        if not path.is_file():
            parser.error(f"solutions/{path.name} does not exist: name an English solution")
        english = _nbformat().read(path, as_version=4)
        for kind in ("markdown", "code"):
            for cell, value in hashes(english, kind).items():
                print(f"{cell}\t{kind}\t{value}")


if __name__ == "__main__":
    main()
