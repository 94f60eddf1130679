"""`make lab` as a learner runs it: the course folder itself, on the port asked for.

(tests/test_browser.py serves a copy of the lessons, so that what it types is not saved
into the course; this checks the default folder.)
"""

from __future__ import annotations

import urllib.request

from lab_server import make_lab

TOKEN = "ddp-test"


def test_make_lab_serves_the_lessons_on_the_given_port():
    with make_lab(TOKEN) as base:
        with urllib.request.urlopen(f"{base}/?token={TOKEN}", timeout=5) as resp:
            assert "/lab/tree/lessons" in resp.url
        with urllib.request.urlopen(f"{base}/api/contents/lessons?token={TOKEN}") as resp:
            assert b'"type": "directory"' in resp.read()
