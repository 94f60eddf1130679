"""What English must not do inside Japanese text (the guard of the Japanese edition).

Used on every stored output of the Japanese solutions, every catalog message, every
translated markdown cell (tests/test_i18n.py) and every message a check gives a wrong answer
in Japanese, its fields filled from the real run (tests/exercises/test_answers.py).
"""

from __future__ import annotations

import re

from ddp_helpers.paths import ROOT  # the repository, as the package finds it

GLOSSARY = ROOT / "i18n" / "ja" / "glossary.md"

JA = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uff01-\uff5e]")  # kana, kanji, full-width
FUNCTION_WORD = re.compile(r"\b(and|or|of|the)\b")
# Quoted English stays as it is: code, torch's messages, a rank's output prefix.
QUOTED = re.compile(r"`[^`\n]*`|'[^'\n]*'|\"[^\"\n]*\"|「[^」\n]*」|\[rank \d+\] ")
FENCE = re.compile(r"```.*?```", re.S)
# English words alone in parentheses: "(measured)", "（fitted）". A gloss of a glossary term
# (ワールドサイズ（world size）) and an acronym (GIL) are fine.
# Only lower-case words (a label, not a name such as BatchNorm), and not a call's arguments:
# `DataLoader(dataset` has a name right before its "(".
PARENTHESISED = re.compile(r"(?:（|(?<![\w)\]])\()\s*([a-z][a-z -]*?)\s*[)）]")
# Words the glossary translates, bare in prose or a message (not the call backward(), not a
# name such as forward_sync_buffers, not a gloss in parentheses).
# A stack's line of torch's functions ("in torch: forward > _pre_forward") names code.
BARE = re.compile(r"(?<![\w.（(])(?<!> )(forward|backward|overlap)(?![\w(）)])(?! >)", re.I)
# GPUs are counted with 基.
GPU_COUNTER = re.compile(
    r"GPU\s*(?:を|は|が|も)?\s*\d+\s*(?:つ|枚)|\d+\s*(?:つ|枚)の\s*GPU|枚のカード"
)


def glossary_terms() -> set[str]:
    """The English side of every "English → 日本語" line of the glossary, lower-cased."""
    terms = set()
    for line in GLOSSARY.read_text(encoding="utf-8").splitlines():
        for pair in re.findall(r"([^;→]+?)\s*→", line.lstrip("- ")):
            for english in re.split(r"\s*/\s*|,\s*", re.sub(r"\([^)]*\)", "", pair)):
                if english.strip():
                    terms.add(english.strip().strip("`").lower())
    return terms


_TERMS = None


def english_in_japanese(line: str) -> list[str]:
    """What is wrong with a line of Japanese text (nothing for a line without Japanese)."""
    global _TERMS
    if not JA.search(line):
        return []
    if _TERMS is None:
        _TERMS = glossary_terms()
    found = []
    text = QUOTED.sub(" ", line)
    if FUNCTION_WORD.search(text):
        found.append("an English function word")
    if re.search(r"。 +\S", line):
        found.append("a space after 。")
    for words in PARENTHESISED.findall(text):
        if words not in _TERMS:
            found.append(f"English in parentheses ({words})")
    for word in BARE.findall(text):
        found.append(f"a bare English word the glossary translates ({word})")
    if GPU_COUNTER.search(text):
        found.append("GPUs counted without 基")
    return found
