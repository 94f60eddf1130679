"""The words of every check: the shared table (`exercises.core`), and how a message is made
from its parts (Phrase, Listed) in the current language (Texts). Public: the grader names
statuses and mistakes with it."""

from __future__ import annotations

from collections.abc import Callable

from .. import i18n
from .verdicts import CheckStatus

# Learner-facing text shared by every check. The scheme every exercise module follows (see
# docs/authors.md): a mistake's message under its key, its title under f"{key}.title", a
# hint under f"hint.{name}"; other keys are phrases that messages are made of.
MESSAGES = i18n.messages(
    "exercises.core",
    {
        "correct": "✅ Exercise {id}: correct. {detail}",
        "not_attempted": (
            "⏳ Exercise {id}: not attempted yet. Replace `raise NotImplementedError(...)` "
            "with your code, run that cell, then run this check again."
        ),
        "not_attempted.title": "the stub still raises NotImplementedError",
        "not_attempted_other": (
            "⏳ Exercise {id}: not attempted yet: your code calls exercise {other}, which "
            "still says `raise NotImplementedError(...)`. Finish that one first."
        ),
        "not_attempted_other.title": "calls another exercise that is still a stub",
        "earlier_first": (
            "The cause is earlier: your {function} "
            "(exercise {other}) is not right yet ({why}). Fix exercise {other} first (its "
            "check says what is wrong), then run this check again."
        ),
        "earlier_first.title": "an earlier exercise it calls is not right yet",
        "not_attempted_pasted": (
            "⏳ Exercise {id}: not attempted yet: your code calls {function}, which still "
            "says `raise NotImplementedError(...)` in this notebook. Paste your answer to "
            "exercise {other} from lesson {lesson} into this notebook's cell for it, run "
            "that cell, then run this check again."
        ),
        "not_attempted_pasted.title": "an earlier lesson's answer not pasted in yet",
        "function": "`{name}()`",
        "function_unknown": "exercise {id}",
        "wrong": "❌ Exercise {id}: not yet. {detail}",
        "error": "💥 Exercise {id}: your code raised an error.\n{detail}",
        "error.title": "raised {exception}",
        "hint_header": "💡 Hint {n} of {total} for exercise {id}: {text}",
        "no_more_hints": "(That was the last hint; `.solution()` shows the reference answer.)",
        "course_frames_hidden": (
            "(The course's own frames are left out; `%env {variable}=full` shows them.)"
        ),
        "solution_header": "Reference solution for exercise {id}:",
        "solution_uses_yours": "{names}: your own answers, from this notebook's cells above",
        "progress_header": "Lesson {lesson}: {passed} of {total} exercises pass",
        "progress_core": "Lesson {lesson}: {passed} of {total} exercises of the core path pass",
        "progress_further": "Going further (optional): {passed} of {total} pass",
        "progress_further_ahead": "Going further (optional): exercise {ids} below, not started",
        "progress_further_ahead_many": (
            "Going further (optional): exercises {ids} below, not started"
        ),
        "further_missing": "not started (optional)",
        "hang": (
            "The check did not finish within {timeout:g} s: a rank waited in a collective "
            "(barrier, all_reduce, broadcast) that another rank never called."
        ),
        "hang.title": "a rank waited in a collective that another rank never called",
        "mismatch": (
            "The ranks did not make the same collective calls (barrier, all_reduce, "
            "broadcast) in the same order: {what}."
        ),
        "mismatch.title": "the ranks made different collective calls",
        "mismatch_abort": "a rank aborted inside a collective ({signal})",
        "endless": (
            "The answer did not return within {timeout:g} s (an endless loop?), so it was stopped."
        ),
        "endless.title": "did not return (an endless loop?)",
        "off_device": (
            "`{function}()` handed {collective}() a tensor made without device=. Here, on "
            "the CPU, that is where the model is, so it works; under nccl the model and the "
            "data are on the rank's GPU, a tensor made without device= stays on the CPU, and "
            "nccl refuses it. Make it where the data are: device=next(model.parameters())"
            ".device, or from a tensor you were given (t.device, torch.zeros_like(t))."
        ),
        "off_device.title": "a tensor for a collective made without device=",
        "from_course": (
            "`{name}` runs the course's own reference answer (from `ddp_helpers`), not code "
            "written in this notebook: write your own."
        ),
        "from_course.title": "the course's reference answer, not the learner's own",
        "mismatch_returned": (
            "rank {returned} had already returned while rank {rank} waited in one"
        ),
        # Where a mistake showed (space.trying): "(Seen with 3 ranks, 2 machines, ...)".
        "tried": " (Seen with {where}.)",
        "tried_ranks": "{v} ranks",
        "tried_machines": "{v} machine(s)",
        "tried_dtype": "{v} values",
        "tried_call": "call {v} of the answer in one process",
        "tried_step": "step {v}",
        "tried_steps": "{v} steps",
        "tried_epochs": "{v} epochs",
        "tried_batch": "a batch of {v}",
        "tried_micro": "{v} micro-batches",
        "tried_items": "{v} items",
        "tried_lengths": "lengths {v}",
        "tried_frozen": "a frozen parameter and a buffer in the model",
        "missing": "not defined in this notebook yet",
        "missing.title": "not defined when the notebook ended",
        "hidden": "{message}\n(Found by the grader's extra cases, beyond those the check shows.)",
        "status_names": {
            CheckStatus.CORRECT: "correct",
            CheckStatus.NOT_ATTEMPTED: "not attempted",
            CheckStatus.WRONG: "wrong",
            CheckStatus.ERROR: "error",
            CheckStatus.MISSING: "missing",
        },
    },
)


class Phrase:
    """A piece of a message by key, with its fields: made into text with the message."""

    def __init__(self, key: str, /, **fields):
        self.key, self.fields = key, fields

    def __repr__(self) -> str:
        return f"Phrase({self.key!r}, **{self.fields!r})"


class Listed:
    """Items shown one after the other, joined as the language joins a list (i18n.listed);
    `last_with_and`: the last two joined by its "and" (i18n.and_listed)."""

    def __init__(self, items, last_with_and: bool = False, groups: bool = False):
        self.items = list(items)
        self.last_with_and = last_with_and
        self.groups = groups  # items that are clauses or lists: Japanese joins them with 、

    def __repr__(self) -> str:
        return f"Listed({self.items!r}, last_with_and={self.last_with_and})"


def and_list(items, groups: bool = False) -> Listed:
    """'0, 1 and 2' for [0, 1, 2] (Japanese: '0、1 と 2'); `groups`: items that are clauses
    ('239 of 517 correct and 217 of 513 correct'; Japanese joins them with 、)."""
    return Listed(items, last_with_and=True, groups=groups)


def sayer(table) -> Callable[..., str]:
    """`say(key, **fields)` for a lesson's code cells: a sentence the cell prints, in the
    notebook's language. The code of a cell is the same in every edition; its words come from
    the lesson module's table."""

    def say(key: str, /, **fields) -> str:
        return Texts(table).text(key, **fields)

    return say


class Texts:
    """Where an exercise's text is found: its module's table, then this module's.

    A field that is a Phrase is made into text from the same tables, a Listed one item by
    item (a format spec after its name, `{lengths: 個}`, follows each item: _Joined).
    """

    def __init__(self, *tables):
        self.tables = (*tables, MESSAGES)

    def __contains__(self, key: str) -> bool:
        return any(key in table for table in self.tables)

    def template(self, key: str) -> str:
        for table in self.tables:
            if key in table:
                return table[key]
        raise KeyError(key)

    def text(self, key: str, /, **fields) -> str:
        """The text under key, its fields filled in, in the current language."""
        return self.template(key).format(**{k: self._value(v) for k, v in fields.items()})

    def _value(self, value):
        if isinstance(value, Phrase):
            return self.text(value.key, **value.fields)
        if isinstance(value, Listed):
            return _Joined([self._value(v) for v in value.items], value)
        return value


class _Joined(str):
    """A Listed field made into text. A template may give it a format spec, which then
    follows each item: Japanese counts every number, so `{worlds: ランク}` is
    「2 ランクと 3 ランク」 where `{worlds}` is "2 and 3" (never 「2 と 3 ランク」)."""

    def __new__(cls, items: list, listed: Listed):
        joined = super().__new__(cls, cls._join(items, listed))
        joined.items, joined.listed = items, listed
        return joined

    @staticmethod
    def _join(items: list, listed: Listed) -> str:
        if listed.last_with_and:
            return i18n.and_listed(items, groups=listed.groups)
        return i18n.listed(items)

    def __format__(self, spec: str) -> str:
        if not spec:
            return str(self)
        return self._join([f"{item}{spec}" for item in self.items], self.listed)


def status_names() -> dict[CheckStatus, str]:
    """Each status's name ("correct", "wrong", ...), in the current language."""
    return MESSAGES["status_names"]
