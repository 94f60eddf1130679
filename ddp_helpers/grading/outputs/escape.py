"""What the grader writes for other programs, made inert there: Markdown for an LMS or a
viewer, CSV for a spreadsheet, lines for the instructor's terminal.

Much of what the grader writes holds a learner's text: a submission's name, an exception
message, a traceback, the repr of an answer inside a check's message. Each writer passes it
through one of these, so that it shows as the text it is and does nothing else:

- `markdown`: the grader's messages keep their code spans (`shard`), and everything else
  is text: what could start a link, an image, raw HTML (`<script>`), a heading, a list or
  a table is escaped, and a code span never runs past its line (a line break would let
  the next line start raw HTML); so is what GitHub-flavoured Markdown would make a live
  link of by itself (https://..., www...., an address a@b.c); `markdown_fill` fills the
  grader's own templates so;
- `code_block`: a fence longer than any run of backticks inside, so nothing closes it;
- `csv_cell`: a cell that a spreadsheet would take for a formula (=, +, -, @) starts with
  an apostrophe, as OWASP advises;
- `printable`: control characters (a terminal's escape sequences) and the Unicode controls
  that reorder text on screen are shown as escapes, \\x1b, \\u202e; every writer uses it.
"""

from __future__ import annotations

import re

# C0 and C1 controls but tab and newline; the bidirectional overrides and isolates.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(text) -> str:
    """text with its control characters written as escapes (a name, for a terminal)."""
    return _CONTROL.sub(lambda m: _escape_char(m.group()), str(text))


def _escape_char(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def line(text) -> str:
    """One line for the terminal: printable, its line breaks shown as \\n."""
    return printable(text).replace("\n", "\\n").replace("\t", " ")


# What makes Markdown of text: a backslash (it would undo the escapes that follow it), the
# `<` that opens raw HTML or an autolink (before a letter, /, ! or ?); a link's or an
# image's `](` or `][` (and a definition's `]:`); and at a line's start, a heading, quote,
# list, table or rule. Emphasis is left as it is: it
# can only make text bold. Intraword underscores (all_gather) are no emphasis anyway.
_INLINE = re.compile(r"\\|<(?=[A-Za-z/!?])|\](?=[(\[:])")
_LINE_START = re.compile(r"^(\s*\d*)([#+=>.)|:*_-])")
# GFM's autolinks (its extension, as GitHub and Gradescope render): `://` after http, https
# or ftp, and `www.`, are broken by escaping their `:` and `.`; an e-mail address (and a
# GitHub @mention) by a word joiner after its `@`, shown as nothing: cmark-gfm reads an
# address out of the text after its escapes are undone, so no backslash can stop it. A
# CommonMark autolink, <https://...>, is raw HTML's `<`, escaped already.
_AUTOLINK = re.compile(r"(?i)(?<=www)\.|:(?=//)|(?<=@)(?=\w)")
WORD_JOINER = "\u2060"
_TICKS = re.compile(r"`+")


def markdown(text) -> str:
    """A message as Markdown that shows it: its code spans kept (within a line), the rest
    escaped (see the module's docstring)."""
    return "\n".join(_markdown_line(part) for part in printable(text).split("\n"))


def markdown_fill(template: str, /, **fields) -> str:
    """The grader's own Markdown template with fields filled in as text: a field inside one
    of the template's code spans stays in a code span (its fence as long as it needs), any
    other is escaped as markdown() escapes text."""
    out = []
    for piece, in_code in _template_pieces(template):
        filled = piece.format(**fields)
        if not in_code:
            out.append(_markdown_line(filled) if "{" in piece else filled)
            continue
        body = printable(filled).replace("\n", " ")
        ticks = _fence(body, least=1)
        pad = " " if body.startswith("`") or body.endswith("`") else ""
        out.append(f"{ticks}{pad}{body}{pad}{ticks}")
    return "".join(out)


def _template_pieces(template: str):
    """(text, False) and (a code span's content, True), in order, of a one-line template."""
    i = 0
    for start, end in _code_spans(template):
        yield template[i:start], False
        yield template[start:end].strip("`"), True
        i = end
    yield template[i:], False


def _markdown_line(text: str) -> str:
    out, i = [], 0
    for start, end in _code_spans(text):
        out.append(_escaped(text[i:start], at_start=i == 0))
        out.append(text[start:end])
        i = end
    out.append(_escaped(text[i:], at_start=i == 0))
    return "".join(out)


def _code_spans(text: str) -> list[tuple[int, int]]:
    """Where CommonMark finds code spans in one line: a run of n backticks up to the next
    run of exactly n."""
    spans, runs = [], list(_TICKS.finditer(text))
    i = 0
    while i < len(runs):
        opening = runs[i]
        closing = next(
            (j for j in range(i + 1, len(runs)) if len(runs[j].group()) == len(opening.group())),
            None,
        )
        if closing is None:
            i += 1
            continue
        spans.append((opening.start(), runs[closing].end()))
        i = closing + 1
    return spans


def _escaped(text: str, at_start: bool) -> str:
    text = _INLINE.sub(lambda m: "\\" + m.group(), text).replace("`", "\\`")
    text = _AUTOLINK.sub(lambda m: "\\" + m.group() if m.group() else WORD_JOINER, text)
    return _LINE_START.sub(r"\1\\\2", text) if at_start else text


def code_block(text) -> str:
    """text as a fenced code block that nothing inside can close."""
    body = printable(text)
    fence = _fence(body, least=3)
    return f"{fence}\n{body}\n{fence}"


def _fence(body: str, least: int) -> str:
    """A run of backticks longer than any in body (and at least `least`): a fence or code
    span delimiter that nothing inside can close."""
    longest = max((len(m.group()) for m in _TICKS.finditer(body)), default=0)
    return "`" * max(least, longest + 1)


_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value):
    """A CSV cell: printable text, and text a spreadsheet would take for a formula begins
    with an apostrophe; numbers as they are."""
    if not isinstance(value, str):
        return value
    value = printable(value)
    return "'" + value if value.startswith(_FORMULA) else value
