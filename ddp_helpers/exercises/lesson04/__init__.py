"""Exercises of lesson 04, sampler and checkpoint (`from ddp_helpers.exercises import lesson04`).

One module per exercise, each with its words, reference, judge and Exercise: 4.1 capstone
(capstone_spies: what its check watches), 4.2 loader, 4.3 quiz, 4.4 evaluate, 4.5 save,
4.6 load, 4.7 gather."""

from __future__ import annotations

from ...i18n import messages
from ..kit import Texts, and_list
from ..kit import progress as _progress
from .capstone import exercise as q1  # exercise 4.1, the capstone: a script turned into DDP
from .capstone import (  # noqa: F401 - the capstone's data and model, as ex.make_dataset
    make_dataset,
    make_loader,  # exercise 4.2's reference (Going further), the capstone's own loader
    make_model,
)
from .evaluate import q4
from .gather import q7
from .load import q6
from .loader import q2
from .quiz import q3
from .save import q5

# This lesson's cells and checks wrap models in DDP: its notebook's %load_ext and the grader's
# scorer ask the launcher to expect it (launcher.expect_ddp); importing it changes nothing.
BUILDS_DDP = True

MESSAGES = messages(
    "exercises.lesson04",
    {
        "finish_first": "This cell uses your {names}: finish those exercises first.",
    },
)

# In the notebook's order: the core path (4.1), then Going further (4.2 to 4.7).
EXERCISES = [q1, q2, q3, q4, q5, q6, q7]


def finish_first(*names: str) -> None:
    """Said by a cell of lesson 04 that runs the learner's answers while one is a stub."""
    shown = and_list([f"`{name}`" for name in names])
    print(Texts(MESSAGES).text("finish_first", names=shown))


def progress() -> None:
    """Which exercises of lesson 04 pass, checked against this notebook's definitions."""
    _progress(EXERCISES, "04")
