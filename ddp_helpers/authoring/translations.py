"""Translated editions: solutions/<lang>/ made from the English solutions and i18n/<lang>/.

A translation is a JSON file per lesson, `i18n/<lang>/NN_name.json`: for each markdown cell of
the English solution, by cell id, `{"translates": H, "text": ...}`, where H is the hash of the
English text it translates. `build` writes `solutions/<lang>/NN_name.ipynb`: the English
notebook's cells with their markdown in that language and every code cell identical to the
English one (outputs kept from the translated notebook's own last run while its code is
unchanged), the notebook's language in its metadata. When an English cell changes, its hash
no longer matches, and `build --check` names the cell until its translation is redone.
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

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
        "has as a markdown cell: delete that entry."
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
            kept = outputs.get(cell.get("id"))
            if kept is not None and kept[0] == cell.source:
                cell.outputs, cell.execution_count = kept[1], kept[2]
            continue
        if cell.cell_type != "markdown":
            continue
        entry = entries.get(cell.get("id"))
        if entry is None:
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
    markdown = {cell.get("id") for cell in nb.cells if cell.cell_type == "markdown"}
    problems += [
        AUTHOR_TEXT["orphan"].format(cell=c, **where) for c in entries if c not in markdown
    ]
    nb.metadata["language"] = lang
    return Edition(nb, problems)


def _outputs_by_id(nb) -> dict:
    if nb is None:
        return {}
    return {
        c.get("id"): (c.source, c.get("outputs", []), c.get("execution_count"))
        for c in nb.cells
        if c.cell_type == "code"
    }


def hashes(english) -> dict[str, str]:
    """Each markdown cell's id and hash: what a translator records in `translates`."""
    return {c.get("id"): text_hash(c.source) for c in english.cells if c.cell_type == "markdown"}


def main(argv: list[str] | None = None) -> None:
    """Print the id and hash of each markdown cell of the English solutions named."""
    import sys

    from ..nbformat_quick import nbformat as _nbformat
    from ..paths import ROOT

    for name in argv if argv is not None else sys.argv[1:]:
        english = _nbformat().read(ROOT / "solutions" / Path(name).name, as_version=4)
        for cell, value in hashes(english).items():
            print(f"{cell}\t{value}")


if __name__ == "__main__":
    main()
