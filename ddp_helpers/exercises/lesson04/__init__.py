"""Exercises of lesson 04, sampler and checkpoint (`from ddp_helpers.exercises import lesson04`).

One module per exercise, each with its words, reference, judge and Exercise: 4.1 capstone
(capstone_spies: what its check watches), 4.2 loader, 4.3 quiz, 4.4 evaluate, 4.5 save,
4.6 load, 4.7 gather."""

from __future__ import annotations

from ...i18n import messages
from ..kit import Texts, and_list, in_order, numbered
from ..kit import progress as _progress
from . import capstone, evaluate, gather, load, loader, quiz, save
from .capstone import (  # noqa: F401 - the capstone's data and model, as ex.make_dataset
    make_dataset,
    make_loader,  # exercise 4.2's reference (Going further), the capstone's own loader
    make_model,
)

# This lesson's cells and checks wrap models in DDP: its notebook's %load_ext and the grader's
# scorer ask the launcher to expect it (launcher.expect_ddp); importing it changes nothing.
BUILDS_DDP = True

MESSAGES = messages(
    "exercises.lesson04",
    {
        "finish_first": "This cell uses your {names}: finish those exercises first.",
    },
)

# By their ids, the notebook's order: the core path (4.1, the capstone: a script turned into
# DDP), then Going further (4.2 to 4.7).
EXERCISES = in_order(capstone, evaluate, gather, load, loader, quiz, save)
globals().update(numbered(EXERCISES))  # ex.q1, ex.q2, ...: each named from its id


def finish_first(*names: str) -> None:
    """Said by a cell of lesson 04 that runs the learner's answers while one is a stub."""
    shown = and_list([f"`{name}`" for name in names])
    print(Texts(MESSAGES).text("finish_first", names=shown))


def progress() -> None:
    """Which exercises of lesson 04 pass, checked against this notebook's definitions."""
    _progress(EXERCISES, "04")
