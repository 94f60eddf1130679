"""The Japanese edition as a learner meets it: `make lab LANG=ja` and `make notebook LANG=ja`,
in a real Chromium.

JupyterLab opens on lessons/ja/01 with its menus in Japanese, the whole lesson in the page, its
Japanese text drawn with a Japanese font (no empty boxes). Lesson 04, the capstone, runs clean
from JupyterLab's Run menu and lesson 01 from Notebook 7's, their checks answering in Japanese
and their pictures' labels drawn without a missing glyph: these are the two lessons' only runs
in a browser (tests/test_browser.py runs 02 and 03). Lessons 02 and 03 are not run here: their
code is the English lessons' (tests/authoring/test_lessons.py holds it so), and their solved
Japanese notebooks run under nbval. The
screenshots go to the same temporary folder as the English ones'.
"""

from __future__ import annotations

import json
import shutil

import nbformat
import pytest
from browser import browser
from lab_server import make_lab
from test_browser import (
    RUN_IN_JAPANESE,
    RUN_IN_NOTEBOOK_7,
    _notebook,
    _open_path,
    _run_all,
    _wait_whole,
)

from ddp_helpers import i18n
from ddp_helpers.exercises import exercises_of, notebook_name
from ddp_helpers.exercises.texts import MESSAGES as CHECK_MESSAGES
from support import ROOT

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


def test_make_lab_lang_ja_opens_the_japanese_first_lesson_whole_in_japanese(lab, page, shots):
    base, served = lab
    first = notebook_name("01")
    page.goto(f"{base}/?token={TOKEN}")
    page.locator(".jp-NotebookPanel:visible .jp-Notebook").wait_for()
    assert page.url.endswith(f"/lab/tree/lessons/ja/{first}")
    menus = page.locator(".lm-MenuBar-itemLabel").all_inner_texts()
    assert "ファイル" in menus and WORDS["run"] in menus, menus  # File, Run: the language pack
    _wait_whole(page, len(nbformat.read(served / "lessons" / "ja" / first, as_version=4).cells))
    assert page.evaluate(GLYPHS_DIFFER, ".jp-RenderedMarkdown"), "Japanese drawn as empty boxes"
    page.screenshot(path=shots / f"ja_{first.removesuffix('.ipynb')}.png")


def test_the_japanese_capstone_lesson_runs_clean_from_the_run_menu(lab, page, shots):
    base, served = lab
    name = notebook_name(RUN_IN_JAPANESE)  # the one lesson test_browser.py leaves to this file
    nb = nbformat.read(served / "lessons" / "ja" / name, as_version=4)
    _open_path(page, base, f"ja/{name}", TOKEN, WORDS)
    _wait_whole(page, len(nb.cells))
    assert len(_run_all(page, words=WORDS)) == sum(c.cell_type == "code" for c in nb.cells)
    _assert_ran_clean_in_japanese(_notebook(page).inner_text(), RUN_IN_JAPANESE)
    page.screenshot(path=shots / f"ja_{name.removesuffix('.ipynb')}.png")


def _assert_ran_clean_in_japanese(text: str, lesson: str) -> None:
    """The page of a Japanese lesson run as handed out: rank lines, every check "not
    attempted" in Japanese, no traceback, no glyph missing from the pictures' font."""
    assert "[rank 0]" in text and "[rank 1]" in text
    with i18n.using("ja"):
        for ex in exercises_of(lesson):
            said = CHECK_MESSAGES["not_attempted"].format(id=ex.id).splitlines()[0]
            assert said in text, ex.id
    assert "Traceback (most recent call last)" not in text
    assert "not attempted yet" not in text  # no check answered in English
    assert "missing from" not in text and "findfont" not in text  # matplotlib's glyph warnings


def test_make_notebook_lang_ja_runs_lesson_01_in_notebook_7(tmp_path, page, shots):
    """`make notebook LANG=ja` (Jupyter Notebook 7, the course's settings): the Japanese
    lesson 01 opens, every cell comes into the page, Run All Cells from its Japanese Run menu
    runs it clean, and nothing pops up."""
    shutil.copytree(ROOT / "lessons", tmp_path / "lessons")
    first = notebook_name(RUN_IN_NOTEBOOK_7)  # its one full run in a browser
    nb = nbformat.read(tmp_path / "lessons" / "ja" / first, as_version=4)
    with make_lab(TOKEN, target="notebook", LAB_ROOT=str(tmp_path), LANG="ja") as base:
        tab = page.context.browser.new_page(viewport={"width": 1280, "height": 900})
        tab.set_default_timeout(60_000)
        try:
            tab.goto(f"{base}/?token={TOKEN}")
            _notebook(tab).wait_for()
            assert tab.url.endswith(f"/notebooks/lessons/ja/{first}")
            tab.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").wait_for()
            # The course's settings, as this page loaded them (Notebook 7's own defaults
            # differ): no build prompts, every cell rendered.
            config = json.loads(tab.locator("#jupyter-config-data").text_content())
            assert config["buildCheck"] is False and config["buildAvailable"] is False
            tracker = f"{base}{config['settingsUrl']}/@jupyterlab/notebook-extension:tracker"
            fetch = "async url => (await (await fetch(url)).json()).schema.properties"
            mode = tab.evaluate(fetch, f"{tracker}?token={TOKEN}")["windowingMode"]
            assert mode["default"] == "none"
            _wait_whole(tab, len(nb.cells))
            code = sum(c.cell_type == "code" for c in nb.cells)
            assert len(_run_all(tab, words=WORDS)) == code
            _assert_ran_clean_in_japanese(_notebook(tab).inner_text(), RUN_IN_NOTEBOOK_7)
            assert tab.locator(".Toastify__toast").all_inner_texts() == []
            assert tab.locator(".jp-Dialog").count() == 0
            tab.screenshot(path=shots / "notebook7_ja_01.png")
        finally:
            tab.close()
