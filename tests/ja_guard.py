"""What English must not do inside Japanese text (the guard of the Japanese edition).

Used on every stored output of the Japanese solutions, every catalog message, every
translated markdown cell (tests/test_i18n.py) and every message a check gives a wrong answer
in Japanese, its fields filled from the real run (tests/exercises/test_answers.py); and on
the Japanese notebooks' code: its comments and the lines it prints.

What a rule catches (each class the Japanese editor's read found that a rule can):
- English joined into Japanese text: function words (and, or, of, the), a word the glossary
  translates left bare (forward, backward, overlap), lower-case English alone in
  parentheses ("(measured)");
- typography: a space after 。, `x` between numbers where Japanese writes ×, half-width
  parentheses around Japanese, a number joined to Japanese without its half-width space
  (「8 基で230 GB/s」);
- the glossary's counters (GPUs counted with 基; `2 マシン × 2 ランク`, not マシン 2 台 × 2 ランク)
  and its banned renderings (フォワード for 順伝播, 「return した」 for 関数から戻った, あなた for
  自分, the long-vowel パラメーター and バッファー for パラメータ and バッファ);
- the prefix of a note: 注:, never 注意: (`[ddp_helpers] 注:`);
- the glossary's words for a call or a variable left bare in prose: barrier (バリア), epoch
  (エポック), async (非同期); ranks counted 「ランク N 個」 (N ランク, N 個のランク, or ランク N
  alone, which names rank N); the verb シャードする (シャーディングする: シャード is the noun);
- a number of five or more digits, next to its counter or after 上限 / 最大, not grouped with
  commas (「10000 個」 is 「10,000 個」): in what was printed, so a template's `{count} 個` is
  caught when a test renders it with a large value (test_answers, the grader's tests);
- a mistake's title in the past (〜た, 〜された) rather than a state (〜している, 〜していない):
  `past_title`, over every `*.title` of the exercises' domains in the catalog (test_i18n); the
  grader's own events (`grading.scorer`'s check_timeout.title: what the grader did) are
  not a learner's mistake and stay in the past;
- English where the edition speaks Japanese: a comment of a code cell, a line a code cell
  prints (`english_comment`, `english_printed`).
What only a reader can judge, and the editor's read is for: meaning drift against the
English (a dropped condition, a changed subject, a hedge lost), translationese (直訳調), the
glossary's rules that depend on sense ("hold" is not 〜を持ちます when a rank holds a value, but a
process may have (持つ) its own interpreter; a count of five digits is grouped with commas, a
port or a process id is not; whether a template's number field can pass 999, so that it needs
`{count:,}`: a rule sees only the number printed), the clarity of a prompt (does a learner
know what to write), a term used for the wrong idea, paragraphs too long or too nested, and
whether a figure's labels say what the prose says; a method's name used as a verb
(「set_epoch している」 for 「set_epoch を呼んでいる」; 「all_reduce する」 is the glossary's);
a fragment that reads well alone and wrongly once slotted into its host message (a subject lost,
parentheses nested); whether a title is a learner's mistake (〜している) or the grader's event
(its past stays).
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
# barrier / epoch / async: the call, the variable and the keyword are code (backticks, a call's
# "(", "epoch=", a stack's "> barrier"); in prose they are バリア, エポック, 非同期.
BARE = re.compile(
    r"(?<![\w.])(?<!> )(forward|backward|overlap|barrier|epochs?|async)(?![\w(）)=])(?! >)",
    re.I,
)
# A message's field ({epoch}, {epochs: エポック}) is not a word of its text.
FIELD = re.compile(r"\{[^{}]*\}")
# Ranks are counted N ランク or N 個のランク: 「ランク 4 個」 first reads as "rank 4".
RANKS_COUNTED = re.compile(r"ランク\s*(?:\{[^{}]*\}|\d+)\s*個")
# Five or more digits without their commas, before a counter or after a limit's word.
UNGROUPED = re.compile(
    r"(?<![\d,.])\d{5,}\s*(?:個|件|行|要素|バイト|回|ステップ|ファイル|プロセス)"
    r"|(?:上限|最大)\s*\d{5,}(?![\d,.])"
)
# A mistake's title says a state of the answer (〜している, 〜していない, a noun phrase), not
# an event in the past: 「学習率をワールドサイズ倍にした」 is 「…倍にしている」. A closing
# parenthesis may follow (「戻らなかった（無限ループの可能性）」).
PAST_TITLE = re.compile(r"(?:た|だ)(?:（[^（）]*）)?$")
# GPUs are counted with 基.
GPU_COUNTER = re.compile(
    r"GPU\s*(?:を|は|が|も)?\s*\d+\s*(?:つ|枚)|\d+\s*(?:つ|枚)の\s*GPU|枚のカード"
)
# "2 マシン x 2 ランク": Japanese multiplies with ×.
TIMES = re.compile(r"(?:\d|[\u3040-\u30ff\u3400-\u9fff）)])\s*x\s*\d")
# Japanese inside half-width parentheses: （…） in Japanese text.
# A digit against kana or kanji, either side: 「で230」, 「230個」 (outside backticks and quotes).
NUMBER_JOINED = re.compile(r"[\u3040-\u30ff\u3400-\u9fff][0-9]|[0-9][\u3040-\u30ff\u3400-\u9fff]")
HALF_WIDTH_PARENTHESES = re.compile(r"\([^()（）]*[\u3040-\u30ff\u3400-\u9fff][^()（）]*\)")
# Renderings the glossary rejects: the term it chose instead.
REJECTED = {
    "フォワード": "順伝播",
    "バックワード": "逆伝播",
    "return した": "関数から戻った",
    "return する": "関数から戻る",
    "あなた": "自分",
    "パラメーター": "パラメータ",
    "バッファー": "バッファ",
    "シャードする": "シャーディングする",
    "シャードして": "シャーディングして",
    "シャードした": "シャーディングした",
    "シャード化": "シャーディング",
}
# A note is 注: (the glossary's `[ddp_helpers] note:` → `[ddp_helpers] 注:`), never 注意:.
NOTE_PREFIX = re.compile(r"注意\s*[:：]")
# "2 machines x 2 ranks" is `2 マシン × 2 ランク`; machines alone are counted with 台.
MACHINES_TIMES_RANKS = re.compile(r"マシン\s*\S+\s*台\s*×")
MACHINES_UNCOUNTED = re.compile(r"(?<![\w.])\d+\s*マシン(?!\s*×|ごと)")  # 「2 マシンでは」
# English words of a label: two or more lower-case letters, not a name in code (no _ or .
# inside, no call), not a word that is data (a backend's or a device's name).
_ENGLISH_WORD = re.compile(r"(?<![\w.])[a-z]{2,}(?![\w.(])")
DATA_WORDS = {"gloo", "nccl", "cpu", "cuda", "mps", "xpu", "env", "tcp", "inf", "nan"}


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
    for word in BARE.findall(FIELD.sub(" ", text)):
        found.append(f"a bare English word the glossary translates ({word})")
    if GPU_COUNTER.search(text):
        found.append("GPUs counted without 基")
    if TIMES.search(text):
        found.append("x between numbers (write ×)")
    if HALF_WIDTH_PARENTHESES.search(text):
        found.append("half-width parentheses around Japanese (write （）)")
    found += [f"{bad} (the glossary says {good})" for bad, good in REJECTED.items() if bad in text]
    if NOTE_PREFIX.search(text):
        found.append("注意: (a note is 注:)")
    if NUMBER_JOINED.search(text):
        found.append("a number joined to Japanese (a half-width space between them)")
    if MACHINES_TIMES_RANKS.search(text):
        found.append("マシン N 台 × N ランク (the glossary says N マシン × N ランク)")
    if MACHINES_UNCOUNTED.search(text):
        found.append("N マシン outside N マシン × N ランク (machines alone: マシン N 台)")
    if RANKS_COUNTED.search(text):
        found.append("ランク N 個 (the glossary says N ランク or N 個のランク)")
    if UNGROUPED.search(text):
        found.append("a count of five or more digits without commas (write {n:,})")
    return found


def past_title(title: str) -> bool:
    """A mistake's title in the past (〜た), where the glossary wants a state (〜している)."""
    return bool(PAST_TITLE.search(title.strip()))


def _english_words(text: str) -> list[str]:
    return [w for w in _ENGLISH_WORD.findall(QUOTED.sub(" ", text)) if w not in DATA_WORDS]


def comments(source: str) -> list[str]:
    """The comments of a code cell (a magic's line and line magics aside)."""
    import io
    import tokenize

    lines = ["" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines()]
    tokens = tokenize.generate_tokens(io.StringIO("\n".join(lines) + "\n").readline)
    return [t.string for t in tokens if t.type == tokenize.COMMENT]


def english_comment(comment: str) -> bool:
    """A comment in English (the Japanese edition translates comments): an English word and
    no Japanese. Solution markers and tool directives stay."""
    comment = comment.lstrip("#")
    if JA.search(comment) or "SOLUTION" in comment:
        return False
    if re.match(r"\s*(noqa|type:|fmt:|pragma)", comment):
        return False
    return bool(_english_words(comment))


def english_printed(line: str) -> bool:
    """A line a code cell of the Japanese edition printed, in English: an English word and
    no Japanese (a rank's `[rank k]` prefix, numbers and quoted code aside)."""
    if JA.search(line):
        return False
    return bool(_english_words(re.sub(r"\[rank \d+\]", " ", line)))
