"""What an exercise's module is written with: `from ..kit import Exercise, Wrong, ...`.

An Exercise declares its words, hints and mistakes (model); its check runs the answer on ranks
(running), with harnesses that share what kit holds (harness), and says where a mistake
showed (space). A lesson's package lists its exercises by their numbers (in_order, numbered)
and prints its progress table (progress)."""

from __future__ import annotations

from ..launcher.plain import is_tensor
from .answer import Answer
from .harness import process_group, rank_folder, rank_folders, weights_apart, writers
from .model import (
    RANK_MISTAKES,
    Exercise,
    Mistake,
    Result,
    Wrong,
    in_order,
    numbered,
    rank_mistakes,
)
from .progress import progress
from .running import answers_to, call, each_case, hang_limit, run_answer, run_on_ranks
from .space import CHECK_SEED, Space, on_hidden_seeds, trying
from .texts import Listed, Phrase, Texts, and_list, sayer
from .verdicts import CheckStatus, Hidden

__all__ = [
    "CHECK_SEED",
    "RANK_MISTAKES",
    "Answer",
    "CheckStatus",
    "Exercise",
    "Hidden",
    "Listed",
    "Mistake",
    "Phrase",
    "Result",
    "Space",
    "Texts",
    "Wrong",
    "and_list",
    "answers_to",
    "call",
    "each_case",
    "hang_limit",
    "in_order",
    "is_tensor",
    "numbered",
    "on_hidden_seeds",
    "process_group",
    "progress",
    "rank_folder",
    "rank_folders",
    "rank_mistakes",
    "run_answer",
    "run_on_ranks",
    "sayer",
    "trying",
    "weights_apart",
    "writers",
]
