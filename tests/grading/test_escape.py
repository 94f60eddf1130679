"""What the grader writes for other programs (grading/outputs/escape.py): a learner's text in the
feedback's Markdown, rendered by a CommonMark renderer as an LMS would, shows as the text
it is; a CSV cell is no formula; a terminal gets no escape sequence."""

from __future__ import annotations

import re

import pytest
from markdown_it import MarkdownIt

from ddp_helpers.grading.outputs.escape import code_block, csv_cell, line, markdown, markdown_fill

# What a learner can put in a name, an exception message or the repr of an answer.
HOSTILE = [
    "<script>alert(1)</script>",
    '<img src=x onerror="alert(1)">',
    "[click me](javascript:alert(1))",
    "![x](javascript:alert(1))",
    "<javascript:alert(1)>",
    "[ref]\n\n[ref]: javascript:alert(1)",
    "```\n<script>alert(2)</script>",
    "`x\n<script>alert(3)</script>`",
    "\\<script>alert(4)</script>",
    "# big\n> quoted\n- listed\n1. counted\n| a | b |\n|---|---|",
    "a `` ` `` b ` c <b>bold</b>",
]
RENDERED = MarkdownIt("commonmark").enable("table")


def _html(text: str) -> str:
    return RENDERED.render(text)


def _visible(html: str) -> str:
    """The text a reader sees: tags dropped, entities read."""
    import html as html_module

    return html_module.unescape(re.sub(r"<[^>]+>", "", html))


@pytest.mark.parametrize("hostile", HOSTILE)
def test_a_learners_text_renders_as_text_and_nothing_else(hostile):
    html = _html(markdown(f"shard returned {hostile} on rank 0"))
    assert (
        "<script" not in html and "<img" not in html and "javascript:" not in html.split('"')[1::2]
    )
    assert 'href="javascript' not in html and "<h1" not in html and "<blockquote" not in html
    assert "<ul" not in html and "<ol" not in html and "<table" not in html
    assert "<pre" not in html  # no code block opened by the learner's fence


def test_the_graders_code_spans_stay_code():
    html = _html(markdown("`shard` is not defined (was its cell run?)"))
    assert "<code>shard</code>" in html
    html = _html(markdown("Code cell 3 (`x <b>y</b>`) raised"))  # inside a span: shown, as code
    assert "<code>x &lt;b&gt;y&lt;/b&gt;</code>" in html


@pytest.mark.parametrize("hostile", HOSTILE)
def test_a_field_in_a_templates_code_span_stays_in_it(hostile):
    html = _html(markdown_fill("# Feedback: `{name}`", name=hostile))
    assert html.startswith("<h1>Feedback: <code>") and html.count("<code>") == 1
    assert "<script" not in html and "<img" not in html


@pytest.mark.parametrize("hostile", HOSTILE)
def test_a_code_block_cannot_be_closed_from_inside(hostile):
    html = _html(code_block(hostile + "\n````````\nafter"))
    assert html.count("<pre>") == 1 and html.rstrip().endswith("</code></pre>")
    assert _visible(html).rstrip("\n").endswith("after")


def test_plain_messages_read_as_they_are_written():
    text = "[1, 2, 3] is what each rank held; all_gather and RLIMIT_DATA (64 << 20) > 3"
    assert markdown(text) == text  # nothing a reader of the raw file would stumble on
    assert _visible(_html(markdown(text))).strip() == text


def test_csv_cells_are_never_formulas_and_hold_no_control_characters():
    assert csv_cell('=HYPERLINK("http://evil","x")') == '\'=HYPERLINK("http://evil","x")'
    for start in "+-@\t":
        assert csv_cell(start + "1").startswith("'")
    assert csv_cell("\r=1") == "\\x0d=1"  # shown, and so no formula either
    assert csv_cell("alice") == "alice" and csv_cell(3) == 3
    assert csv_cell("bob\x1b]0;pwned\x07") == "bob\\x1b]0;pwned\\x07"


def test_terminal_lines_hold_no_escape_sequences_or_reordering():
    shown = line("sub\x1b[2J\x1b]0;pwned\x07/\u202eevil.ipynb\nnext")
    assert "\x1b" not in shown and "\u202e" not in shown and "\n" not in shown
    assert shown == "sub\\x1b[2J\\x1b]0;pwned\\x07/\\u202eevil.ipynb\\nnext"
