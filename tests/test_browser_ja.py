"""The Japanese edition as a learner meets it: `make lab LANG=ja`, in a real Chromium.

JupyterLab opens on lessons/ja/01 with its menus in Japanese; each Japanese lesson runs clean
from the Run menu, its checks answering in Japanese; the page's Japanese text and the
pictures' labels are drawn with a Japanese font (no empty boxes). A screenshot of each lesson
goes to the same temporary folder as the English ones'.
"""

from __future__ import annotations

import shutil
import time

import nbformat
import pytest
from browser import browser
from lab_server import make_lab
from test_browser import _notebook, _open_path, _run_all

from conftest import ROOT
from ddp_helpers import i18n
from ddp_helpers.exercises import LESSONS, exercises_of, notebook_name
from ddp_helpers.exercises.texts import MESSAGES as CHECK_MESSAGES

TOKEN = "ddp-browser-test-ja"
WORDS = {"idle": "アイドル", "run": "実行", "run_all": "すべてのセルを実行"}  # the language pack's

# Draws text with the page's font on a canvas, twice: "日本語" and the same characters in
# another order. With a Japanese font the two pictures differ; without one, every character
# is the same empty box and the two are identical.
GLYPHS_DIFFER = """(selector) => {
  const font = getComputedStyle(document.querySelector(selector)).fontFamily;
  const canvas = document.createElement("canvas");
  canvas.width = 160; canvas.height = 48;
  const ctx = canvas.getContext("2d");
  const draw = (text) => {
    ctx.clearRect(0, 0, 160, 48);
    ctx.font = "32px " + font;
    ctx.fillText(text, 0, 38);
    return canvas.toDataURL();
  };
  return draw("日本語") !== draw("語本日");
}"""


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """`make lab LANG=ja` serving a copy of the lessons: (its address, the folder it serves)."""
    served = tmp_path_factory.mktemp("lab-ja")
    shutil.copytree(ROOT / "lessons", served / "lessons")
    with make_lab(TOKEN, LAB_ROOT=str(served), LANG="ja") as base:
        yield base, served


@pytest.fixture(scope="module")
def page(lab):
    with browser() as b:
        page = b.new_page(viewport={"width": 1280, "height": 900}, locale="ja-JP")
        page.set_default_timeout(60_000)
        yield page


def test_make_lab_lang_ja_opens_the_japanese_first_lesson_with_japanese_menus(lab, page):
    base, _ = lab
    page.goto(f"{base}/?token={TOKEN}")
    page.locator(".jp-NotebookPanel:visible .jp-Notebook").wait_for()
    assert page.url.endswith(f"/lab/tree/lessons/ja/{notebook_name('01')}")
    menus = page.locator(".lm-MenuBar-itemLabel").all_inner_texts()
    assert "ファイル" in menus and WORDS["run"] in menus, menus  # File, Run: the language pack


@pytest.mark.parametrize("lesson", sorted(LESSONS))
def test_each_japanese_lesson_runs_clean_with_japanese_checks_and_fonts(lab, page, lesson, request):
    base, served = lab
    name = notebook_name(lesson)
    nb = nbformat.read(served / "lessons" / "ja" / name, as_version=4)
    code = sum(c.cell_type == "code" for c in nb.cells)
    _open_path(page, base, f"ja/{name}", TOKEN, WORDS)
    deadline = time.monotonic() + 30
    while (shown := _notebook(page).locator(".jp-Cell").count()) != len(nb.cells):
        assert time.monotonic() < deadline, f"{shown} of {len(nb.cells)} cells in the page"
        time.sleep(0.2)
    assert len(_run_all(page, words=WORDS)) == code
    text = _notebook(page).inner_text()
    assert "[rank 0]" in text and "[rank 1]" in text
    with i18n.using("ja"):
        for ex in exercises_of(lesson):
            said = CHECK_MESSAGES["not_attempted"].format(id=ex.id).splitlines()[0]
            assert said in text, ex.id
    assert "Traceback (most recent call last)" not in text
    assert "not attempted yet" not in text  # no check answered in English
    assert "missing from" not in text and "findfont" not in text  # matplotlib's glyph warnings
    assert page.evaluate(GLYPHS_DIFFER, ".jp-RenderedMarkdown"), "Japanese drawn as empty boxes"
    shots = request.getfixturevalue("shots")
    page.screenshot(path=shots / f"ja_{name.removesuffix('.ipynb')}.png", full_page=False)
