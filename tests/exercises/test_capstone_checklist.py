"""Lesson 04's checklist above the capstone names the steps the capstone's reference writes.

The markdown cell right above the capstone's answer lists the recipe; each item carries in
backticks the code it names. Those pieces of code must be written, in the checklist's
order, in the reference (`capstone.train_ddp`) and in the solution notebook's answer, and
the Japanese checklist must name the same code, item by item.
"""

from __future__ import annotations

import inspect
import re

import nbformat
import pytest

from ddp_helpers.exercises.lesson04 import capstone
from support import ROOT

NAME = "04_sampler_and_checkpoint.ipynb"
ITEM = re.compile(r"^\d+\. (.+?)(?=^\d+\. |^\s*$|\Z)", re.M | re.S)
CODE = re.compile(r"`([^`]+)`")
# The steps issue 51 asks the checklist to name, each by a piece of its code.
STEPS = (
    "setup()",
    "wrap(",
    "GLOBAL_BATCH // dist.get_world_size()",
    "DistributedSampler(",
    "set_epoch(epoch)",
    ".to(device)",
    "dist.get_rank() == 0",
    "model.module.state_dict()",
    "cleanup()",
)


def _answer_and_checklist(folder):
    nb = nbformat.read(ROOT / folder / NAME, as_version=4)
    at = next(
        i for i, c in enumerate(nb.cells)
        if c.cell_type == "code" and c.source.startswith("def train_ddp(")
    )  # fmt: skip
    above = nb.cells[at - 1]
    assert above.cell_type == "markdown"
    return nb.cells[at].source, above.source


def _items(markdown: str) -> list[list[str]]:
    """Each numbered item's code, in backticks."""
    return [CODE.findall(item) for item in ITEM.findall(markdown)]


def _in_order(source: str, pieces: list[str]) -> list[str]:
    """The pieces not found in `source` after the one before them."""
    missing, at = [], 0
    for piece in pieces:
        found = source.find(piece, at)
        if found < 0:
            missing.append(piece)
        else:
            at = found + len(piece)
    return missing


def test_the_checklist_names_every_step_of_the_recipe():
    _, checklist = _answer_and_checklist("solutions")
    items = _items(checklist)
    assert len(items) >= 7 and all(items), "each checklist item names its code in backticks"
    named = [piece for item in items for piece in item]
    for step in STEPS:
        assert any(step in piece for piece in named), f"the checklist does not name {step!r}"
    assert not _in_order(" ".join(named), list(STEPS)), "the steps out of the recipe's order"


@pytest.mark.parametrize("where", ["reference", "solution"])
def test_each_step_named_is_written_in_the_checklists_order(where):
    answer, checklist = _answer_and_checklist("solutions")
    source = inspect.getsource(capstone.train_ddp) if where == "reference" else answer
    body = source[source.index("\n") :]  # the body, not the signature
    pieces = [piece for item in _items(checklist) for piece in item]
    assert not _in_order(body, pieces), (
        f"the capstone's {where} does not write these, in the checklist's order: "
        f"{_in_order(body, pieces)}"
    )


def test_the_japanese_checklist_names_the_same_code():
    _, english = _answer_and_checklist("solutions")
    _, japanese = _answer_and_checklist("solutions/ja")
    assert _items(japanese) == _items(english)
