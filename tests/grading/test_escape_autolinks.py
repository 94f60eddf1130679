"""A learner's text in the feedback's Markdown makes no live link where GitHub-flavoured
Markdown renders it (GitHub, Gradescope): rendered by cmark-gfm, GitHub's own renderer, with
its autolink extension (grading/outputs/escape.py)."""

from __future__ import annotations

import html
import re

import cmarkgfm
import pytest

from ddp_helpers.grading.outputs.escape import WORD_JOINER, markdown

# Each of GFM's autolinks: extended URL (http, https, ftp; any case), extended www, extended
# e-mail (with mailto: and xmpp:), and CommonMark's own <...>.
LINKS = [
    "https://evil.example/login?next=/grades",
    "HTTP://EVIL.EXAMPLE/x",
    "ftp://files.evil.example/answers.zip",
    "www.evil.example/path",
    "(www.evil.example)",
    "see:https://evil.example",
    "alice.b+grades@evil.example.org",
    "mailto:alice@evil.example",
    "xmpp:alice@evil.example/phone",
    "<https://evil.example>",
    "<alice@evil.example>",
    "https://a.example and www.b.example and c@d.example, on one line",
]
# Emphasis is left as it is (it can only make text bold): the link inside must not live.
EMPHASISED = ["*www.evil.example*", "_https://evil.example_", "~~www.evil.example~~"]


def _gfm(text: str) -> str:
    return cmarkgfm.github_flavored_markdown_to_html(text)


def _visible(rendered: str) -> str:
    """The text a reader sees: tags dropped, entities read, word joiners (shown as nothing)
    left out."""
    return html.unescape(re.sub(r"<[^>]+>", "", rendered)).replace(WORD_JOINER, "").strip()


@pytest.mark.parametrize("link", LINKS + EMPHASISED)
def test_gfm_makes_a_live_link_of_each_as_it_is(link):
    assert "<a " in _gfm(f"rank 0 said {link}")  # so that the test below means something


@pytest.mark.parametrize("link", LINKS)
def test_escaped_it_is_no_link_and_reads_the_same(link):
    text = f"rank 0 said {link}"
    rendered = _gfm(markdown(text))
    assert "<a" not in rendered
    assert _visible(rendered) == text


@pytest.mark.parametrize("link", EMPHASISED)
def test_escaped_inside_emphasis_it_is_no_link(link):
    assert "<a" not in _gfm(markdown(f"rank 0 said {link}"))


def test_the_graders_code_spans_keep_their_addresses_as_code():
    rendered = _gfm(markdown("open `https://pytorch.org/docs` for all_gather"))
    assert "<code>https://pytorch.org/docs</code>" in rendered and "<a" not in rendered
