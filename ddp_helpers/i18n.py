"""The course's languages: which one a notebook speaks, and every learner-facing text in it.

Each module keeps its English text in one `MESSAGES = messages("domain", {...})` table; a
translation is a catalog, `ddp_helpers/locale/<language>.json`, holding the same domains, keys
and format fields (tests/test_i18n.py checks). A lookup answers in the current language and
falls back to English for a key a catalog lacks.

The current language is, in order: the one `using()` chose for a block (the grader, writing a
submission's feedback); `DDP_HELPERS_LANG` when the user set it before Python started; the
notebook's, which its set-up cell (written by `build` from the notebook's metadata) declares
with `use()`; English. `use()` writes `DDP_HELPERS_LANG`, so the ranks a launch forks speak the
notebook's language too.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import string
import unicodedata
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from functools import cache
from pathlib import Path

LANGUAGES = {"en": "English", "ja": "日本語"}
ENV = "DDP_HELPERS_LANG"
LOCALE_DIR = Path(__file__).with_name("locale")
_override: ContextVar[str | None] = ContextVar("ddp_helpers_language", default=None)
REGISTRY: dict[str, Messages] = {}


def normalize(value: str | None) -> str | None:
    """'ja', 'ja_JP.UTF-8', 'JA-jp' -> 'ja'; None for a language the course does not have."""
    if not value:
        return None
    code = value.replace("-", "_").split("_")[0].split(".")[0].lower()
    return code if code in LANGUAGES else None


# Set before this process started, to a language the course has (by the user, or by the
# grader for a submission): it wins over what a notebook's language cell declares.
_FROM_USER = normalize(os.environ.get(ENV)) is not None


def checked(value: str) -> str:
    """`value` as a language code, or a ValueError that lists the languages there are."""
    code = normalize(value)
    if code is None:
        names = ", ".join(f"{k!r} ({v})" for k, v in LANGUAGES.items())
        raise ValueError(f"The course has no language {value!r}: use one of {names}.")
    return code


def current() -> str:
    """The language messages are written in now."""
    return _override.get() or normalize(os.environ.get(ENV)) or "en"


def use(language: str) -> None:
    """This notebook's language (its language cell calls this); DDP_HELPERS_LANG set by the
    user before the kernel started wins."""
    code = checked(language)
    if not _FROM_USER:
        os.environ[ENV] = code


@contextlib.contextmanager
def using(language: str | None) -> Iterator[str]:
    """Within the block, messages are in `language` (None: leave it as it is)."""
    if language is None:
        yield current()
        return
    token = _override.set(checked(language))
    try:
        yield current()
    finally:
        _override.reset(token)


@cache
def catalog(language: str) -> dict[str, dict]:
    """A translation's catalog: {domain: {key: text}} ({} for English)."""
    if language == "en":
        return {}
    return json.loads((LOCALE_DIR / f"{language}.json").read_text(encoding="utf-8"))


class Messages(Mapping):
    """One module's learner-facing text: English here, other languages from their catalog."""

    def __init__(self, domain: str, english: dict):
        self.domain = domain
        self.english = english
        REGISTRY[domain] = self

    def __getitem__(self, key: str):
        language = current()
        if language != "en":
            text = catalog(language).get(self.domain, {}).get(str(key))
            if text is not None:
                english = self.english[key]
                # A table of words (status names): English keys, translated values.
                return (
                    {k: text.get(str(k), v) for k, v in english.items()}
                    if isinstance(english, dict)
                    else text
                )
        return self.english[key]

    def __iter__(self):
        return iter(self.english)

    def __len__(self) -> int:
        return len(self.english)


def messages(domain: str, english: dict) -> Messages:
    """Declare a module's learner-facing text (English), translated where a catalog has it."""
    return Messages(domain, english)


def fields(text: str) -> set[str]:
    """The format fields a message uses: a translation must use the same ones."""
    return {name for _, name, _, _ in string.Formatter().parse(text) if name is not None}


use_language = use  # as `ddp_helpers.use_language`


# How a message's parts are joined, in each language: lists, the last two of several items,
# sentences, the clauses of one sentence. Every join of words in a message goes through these.
JOINS = messages(
    "i18n",
    {
        "list": ", ",
        "and": "{first} and {last}",
        "and_groups": "{first} and {last}",  # the last of several groups, each a list itself
        "sentence": " ",
        "clause": "; ",
        "stop": ".",
    },
)


def listed(items) -> str:
    """'0, 1, 2' (Japanese: '0、1、2')."""
    return JOINS["list"].join(map(str, items))


_WIDE = "\u3000-\u9fff\uff00-\uffef"  # CJK characters and punctuation, full-width forms
_SPACE_BETWEEN_WIDE = re.compile(f"(?<=[{_WIDE}]) (?=[{_WIDE}])")


def tightened(text: str) -> str:
    """text without a space between two CJK characters (「は 集団通信 で」 is 「は集団通信で」): a
    template keeps the space beside a field for a value that is code, and a value that is
    Japanese text then leaves it between Japanese; English text is unchanged."""
    return _SPACE_BETWEEN_WIDE.sub("", text)


def and_listed(items, groups: bool = False) -> str:
    """'0, 1 and 2' (Japanese: '0、1 と 2'); one item as it is. `groups`: items that are
    lists themselves ('4.1 and 4.2, 2.1 from lesson 02 and ...'; Japanese joins them with 、).
    A space the template puts between two CJK characters goes: 「と レッスン」 is 「とレッスン」."""
    *first, last = map(str, items)
    if not first:
        return last
    template = JOINS["and_groups" if groups else "and"]
    return tightened(template.format(first=listed(first), last=last))


def sentences(*parts: str) -> str:
    """Sentences one after the other (a space between them in English, none in Japanese)."""
    return JOINS["sentence"].join(p for p in parts if p)


def clauses(parts) -> str:
    """Clauses of one sentence, and its end: 'a; b.' (Japanese: 'a。b。')."""
    return JOINS["clause"].join(parts) + JOINS["stop"]


def padded(text, width: int) -> str:
    """`text` with spaces after it to fill `width` columns as a terminal or a notebook shows
    them: a wide character (Japanese) takes two, so a column of translated labels still lines
    up. Never cut: a longer text comes back as it is (as f"{text:{width}s}" does)."""
    text = str(text)
    used = sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)
    return text + " " * (width - used)
