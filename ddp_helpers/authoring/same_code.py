"""Whether a translated code cell is the English code, its comments and printed words aside.

A translation may change a code cell's comments and the string literals it translates (a
label a cell prints, a docstring), nothing else: the names, calls, numbers, the data strings
(a backend's name, a key), the f-strings' placeholders and their formats, the cell magic's
line. `differences(english, translated)` says where a translated cell does more than that.

A literal counts as translated when the translation's contains Japanese (kana, kanji or
full-width forms) and the English one has none: "gloo" changed to "nccl" is a change of code,
"loss" changed to "損失" a translation. An f-string may reorder its placeholders (Japanese
puts the number elsewhere in the sentence), but it keeps each of them, with its conversion
and format.
"""

from __future__ import annotations

import ast
import copy
import re

from ..stubs import BEGIN, END

JAPANESE = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uff01-\uff5e]")

AUTHOR_TEXT = {
    "syntax": "line {line} does not parse ({error})",
    "magic": "its first line ({translated!r}) is not the English one ({english!r})",
    "structure": (
        "line {line} differs from the English code in more than comments and translated "
        "strings (English line {english_line})"
    ),
    "markers": (
        "its solution markers (# BEGIN SOLUTION, # END SOLUTION) are not where the English "
        "has them: keep each before and after the same lines of code"
    ),
    "literal": (
        "line {line}: the string {translated!r} replaces {english!r} without translating it "
        "(a translated string holds Japanese; a data string stays as it is)"
    ),
}


def _python(source: str) -> str:
    """The cell as Python: IPython's line magics become calls; `%%` cells are split before."""
    if not re.search(r"^\s*[%!]", source, re.M):
        return source  # (IPython's transform drops leading blank lines: line numbers move)
    from IPython.core.inputtransformer2 import TransformerManager

    return TransformerManager().transform_cell(source)


def _split_magic(source: str) -> tuple[str, str]:
    """A cell magic's line and the cell's body (whose lines keep their numbers: the magic's
    line becomes a `pass`)."""
    if source.startswith("%%"):
        first, _, body = source.partition("\n")
        return first, "pass\n" + body
    return "", source


class _Words(ast.NodeTransformer):
    """Blanks every literal's words (collected in order), keeping the code's shape."""

    def __init__(self):
        self.literals: list[tuple[ast.AST, str]] = []

    def visit_JoinedStr(self, node):
        words = "".join(
            v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str)
        )
        self.literals.append((node, words))
        # A translation may reorder the placeholders: each side visits them in one order.
        values = sorted((v for v in node.values if isinstance(v, ast.FormattedValue)), key=_blank)
        placed = [self.visit(v) for v in values]
        return ast.copy_location(ast.JoinedStr(values=placed), node)

    def visit_Constant(self, node):
        if isinstance(node.value, str):
            self.literals.append((node, node.value))
            return ast.copy_location(ast.Constant(value="…"), node)
        return node


def _blank(node) -> str:
    """A placeholder's code with its words blanked: the order both editions visit it in (a
    placeholder may hold a translated string: `{"ランク":>8}`)."""
    tree = copy.deepcopy(node)
    for sub in ast.walk(tree):
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            sub.value = ""
    return ast.dump(tree)


def _shape(source: str):
    tree = ast.parse(_python(source))
    words = _Words()
    return words.visit(tree), words.literals


def _first_difference(translated, english) -> tuple[int, int]:
    """The lines (translated, English) of the first nodes where the two shapes part."""
    for ours, theirs in zip(ast.walk(translated), ast.walk(english), strict=False):
        if type(ours) is not type(theirs) or _fields(ours) != _fields(theirs):
            return getattr(ours, "lineno", 1), getattr(theirs, "lineno", 1)
    return 1, 1


def _fields(node) -> tuple:
    return tuple(
        (name, value)
        for name, value in ast.iter_fields(node)
        if not isinstance(value, (ast.AST, list))
    )


def _markers(source: str) -> list[str]:
    """The solution markers, each with the number of code lines since the one before (a
    translated comment may take more lines or fewer; code keeps its lines)."""
    found, code = [], 0
    for line in source.splitlines():
        if BEGIN.match(line) or END.match(line):
            found.append(f"{code}:{line.strip()}")
            code = 0
        elif line.strip() and not line.strip().startswith("#"):
            code += 1
    return found


def differences(english: str, translated: str) -> list[str]:
    """What the translated cell changes beyond comments and translated strings (none: [])."""
    if _markers(english) != _markers(translated):
        return [AUTHOR_TEXT["markers"]]
    english_magic, english_body = _split_magic(english)
    magic, body = _split_magic(translated)
    if magic != english_magic:
        return [AUTHOR_TEXT["magic"].format(translated=magic, english=english_magic)]
    try:
        theirs, their_words = _shape(english_body)
    except SyntaxError as exc:  # the English cell is checked by running it
        return [AUTHOR_TEXT["syntax"].format(line=exc.lineno, error=f"English: {exc.msg}")]
    try:
        ours, our_words = _shape(body)
    except SyntaxError as exc:
        return [AUTHOR_TEXT["syntax"].format(line=exc.lineno, error=exc.msg)]
    if ast.dump(ours) != ast.dump(theirs):
        line, english_line = _first_difference(ours, theirs)
        return [AUTHOR_TEXT["structure"].format(line=line, english_line=english_line)]
    problems = []
    for (node, words), (_, english_words) in zip(our_words, their_words, strict=True):
        if words != english_words and not (
            JAPANESE.search(words) and not JAPANESE.search(english_words)
        ):
            problems.append(
                AUTHOR_TEXT["literal"].format(
                    line=node.lineno, translated=words, english=english_words
                )
            )
    return problems
