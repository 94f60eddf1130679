"""The course as a learner meets it: `make lab`, in a real (headless) Chromium.

The README's own `make lab` serves a copy of lessons/ (so that nothing the test types is
saved into the course) on a free port. In the browser: no pop-up on arrival; exercise 1.1
answered right and wrong; a hanging `%%ddp` cell stopped from the toolbar within 3 s, with
the ranks' stacks, and the kernel still usable; a link of lesson 03's contents scrolls to
its Going further section; lessons 02 and 03 run from the Run menu
with every code cell run, rank lines on the page, every check "not attempted" and no
traceback. Lessons 01 and 04 run so in tests/test_browser_ja.py, in Japanese: 01 in
Jupyter Notebook 7 (`make notebook`), 04 in JupyterLab. A screenshot of each lesson goes
to a temporary folder, named at the end of the run. The browser is the system's Chromium
(`make test` installs Debian's as root) or Playwright's own; without one, these tests fail
saying what to install.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import time
from pathlib import Path

import nbformat
import pytest
from browser import browser
from lab_server import make_lab
from playwright.sync_api import expect

from ddp_helpers.exercises import LESSONS, exercises_of, notebook_name
from support import ROOT, SOON

TOKEN = "ddp-browser-test"
# JupyterLab's words the tests click or wait for (test_browser_ja.py: its Japanese ones).
WORDS = {"idle": "Idle", "run": "Run", "run_all": "Run All Cells"}
FIRST = notebook_name("01")


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """`make lab` serving a copy of the lessons: (its address, the folder it serves)."""
    served = tmp_path_factory.mktemp("lab")
    shutil.copytree(ROOT / "lessons", served / "lessons")
    with make_lab(TOKEN, LAB_ROOT=str(served)) as base:
        yield base, served


@pytest.fixture(scope="module")
def page(lab):
    with browser() as b:
        page = b.new_page(viewport={"width": 1280, "height": 900})
        page.set_default_timeout(60_000)
        yield page


def _open(page, base: str, notebook: str) -> None:
    """lessons/<notebook> open, its kernel idle: the page's own tab where it shows that
    notebook already (a reload costs Chromium seconds of CPU), else a fresh workspace."""
    if page.url.split("?")[0] == f"{base}/lab/tree/lessons/{notebook}":
        _wait_idle(page)
        return
    _open_path(page, base, notebook, TOKEN)


def _open_path(page, base: str, notebook: str, token: str, words=WORDS) -> None:
    """lessons/<notebook> open in JupyterLab, its kernel idle."""
    # ?reset: a fresh workspace, this notebook its only tab (so the Run menu's too).
    page.goto(f"{base}/lab/tree/lessons/{notebook}?reset&token={token}")
    page.locator(".jp-NotebookPanel:visible .jp-Notebook").wait_for()
    _wait_idle(page, words)


def _wait_idle(page, words=WORDS) -> None:
    # The kernel is up when the status bar says Idle.
    page.locator(".jp-StatusBar-TextItem", has_text=f"| {words['idle']}").first.wait_for()


def _notebook(page):
    return page.locator(".jp-NotebookPanel:visible .jp-Notebook")


def _prompts(page) -> list[str]:
    return _notebook(page).locator(".jp-CodeCell .jp-InputPrompt").all_inner_texts()


RAN = re.compile(r"^\s*\[\d+\]:\s*$")  # a code cell's prompt once it has run
NOT_RUN = re.compile(r"^\s*\[ \]:\s*$")  # a code cell's prompt before it was queued


def _wait_all_ran(page, count: int, limit: float) -> list[str]:
    prompts = _notebook(page).locator(".jp-CodeCell .jp-InputPrompt")
    try:
        expect(prompts).to_have_text([RAN] * count, timeout=limit * 1000)
    except AssertionError as exc:
        shot = Path(tempfile.mkdtemp(prefix="ddp-browser-")) / "stuck.png"
        page.screenshot(path=shot)
        raise AssertionError(f"cells not run after {limit} s (page: {shot}): {exc}") from None
    return [p.strip() for p in _prompts(page)]


def _run_menu(page, item: str, words=WORDS) -> None:
    page.locator(".lm-MenuBar-itemLabel", has_text=words["run"]).first.click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^{re.escape(item)}$")).click()


def _run_all(page, limit: float = 60, words=WORDS) -> list[str]:
    """Run All Cells from the Run menu, on this notebook; the prompts once all have run."""
    # The Run menu acts on the notebook that has the focus: after a reload JupyterLab
    # may have given it to another of the tabs it restored.
    _notebook(page).locator(".jp-Cell").first.click(position={"x": 8, "y": 8})
    count = len(_prompts(page))
    _run_menu(page, words["run_all"], words)
    # A click that reached the menu before the page was ready queues nothing: once queued,
    # the first cell's prompt says [*] at once. Then the menu is used again, once.
    first = _notebook(page).locator(".jp-CodeCell .jp-InputPrompt").first
    try:
        expect(first).not_to_have_text(NOT_RUN, timeout=15_000)
    except AssertionError:
        _notebook(page).locator(".jp-Cell").first.click(position={"x": 8, "y": 8})
        _run_menu(page, words["run_all"], words)
    return _wait_all_ran(page, count, limit)


def _run_above(page, text: str) -> None:
    """Run All Above Selected Cell, from the Run menu, with the first code cell that holds
    text selected: the set-up a cell further down needs, without the rest of the lesson."""
    code = _notebook(page).locator(".jp-CodeCell")
    above = next(i for i, t in enumerate(code.all_inner_texts()) if text in t)
    before = _prompts(page)[:above]  # a saved notebook's prompts may be numbered already
    code.nth(above).locator(".jp-InputPrompt").click()  # selects it (its left edge collapses)
    _run_menu(page, "Run All Above Selected Cell")
    prompts = _notebook(page).locator(".jp-CodeCell .jp-InputPrompt")
    for i, was in enumerate(before):  # each run now: numbered, and not the number it had
        expect(prompts.nth(i)).to_have_text(RAN, timeout=60_000)
        expect(prompts.nth(i)).not_to_have_text(was, timeout=60_000)


def _wait_whole(page, cells: int) -> None:
    """Every cell of the notebook in the page (windowingMode none, from the course's
    settings), not only those in view."""
    expect(_notebook(page).locator(".jp-Cell")).to_have_count(cells, timeout=30_000)


def _cell_with(page, text: str):
    return _notebook(page).locator(".jp-CodeCell", has_text=text).first


def _replace_source(page, cell, source: str) -> None:
    cell.locator(".cm-content").click()
    page.keyboard.press("Control+a")
    page.keyboard.insert_text(source)  # typed as is: no auto-indent, no closing brackets


def _output_of(cell) -> str:
    return cell.locator(".jp-OutputArea").inner_text()


def _run_new_cell_below(page, source: str):
    """Add a cell below the selected one, type source into it, run it; the cell."""
    page.keyboard.press("Escape")
    page.keyboard.press("b")  # a new cell below, in edit mode after Enter
    page.keyboard.press("Enter")
    page.keyboard.insert_text(source)
    page.keyboard.press("Shift+Enter")
    return _notebook(page).locator(".jp-CodeCell", has_text=source.splitlines()[-1]).last


def _wait_for_output(cell, text: str, limit: float) -> None:
    expect(cell.locator(".jp-OutputArea")).to_contain_text(text, timeout=limit * 1000)


def test_make_lab_opens_the_first_lesson_with_no_pop_up(lab, page):
    base, _ = lab
    page.goto(f"{base}/?token={TOKEN}")
    page.locator(".jp-NotebookPanel:visible .jp-Notebook").wait_for()
    assert page.url.endswith(f"/lab/tree/lessons/{FIRST}")
    # JupyterLab asks about news once its settings and the server's answers are in: by
    # then the network is quiet, and a toast that asks is on the page.
    page.wait_for_load_state("networkidle")
    assert page.locator(".Toastify__toast").all_inner_texts() == []
    assert page.locator(".jp-Dialog").count() == 0


def test_exercise_1_1_typed_right_then_wrong(lab, page, shots):
    base, _ = lab
    _open(page, base, FIRST)
    _run_above(page, "def gpu_for_this_rank():")  # the lesson up to the exercise
    stub = _cell_with(page, "def gpu_for_this_rank():")
    check = _cell_with(page, "ex.q1.check(gpu_for_this_rank)")
    answers = {
        'return torch.device("cuda", int(os.environ["LOCAL_RANK"]))': "✅ Exercise 1.1: correct",
        'return torch.device("cuda", int(os.environ["RANK"]))': "which does not exist there",
    }
    for body, expected in answers.items():
        _replace_source(page, stub, f"def gpu_for_this_rank():\n    {body}\n")
        page.keyboard.press("Shift+Enter")  # runs it and moves to the check below
        page.keyboard.press("Shift+Enter")
        _wait_for_output(check, expected, 30)
        if expected.startswith("✅"):  # the picture in the README (docs/lab.png)
            check.evaluate("cell => cell.scrollIntoView({block: 'end'})")
            page.screenshot(path=shots / "exercise_1_1_correct.png")
    assert "❌ Exercise 1.1: not yet." in _output_of(check)


def test_a_hanging_ddp_cell_stops_from_the_toolbar_with_the_ranks_stacks(lab, page):
    base, _ = lab
    _open(page, base, FIRST)
    _run_above(page, "def whoami():")  # the set-up and imports: %%ddp is loaded
    hang = _run_new_cell_below(
        page, "%%ddp -n 2\nimport time\nprint('waiting', flush=True)\ntime.sleep(600)"
    )
    _wait_for_output(hang, "[rank 1] waiting", 30)
    started = time.monotonic()
    page.locator(
        ".jp-NotebookPanel:visible jp-button[data-command='notebook:interrupt-kernel'],"
        ".jp-NotebookPanel:visible button[data-command='notebook:interrupt-kernel']"
    ).first.click()
    expect(hang.locator(".jp-InputPrompt")).to_have_text(RAN, timeout=SOON * 1000)
    stopped = time.monotonic() - started
    out = _output_of(hang)
    assert stopped < SOON, f"the cell took {stopped:.1f} s to stop"
    assert "Interrupted: every rank was stopped" in out and "KeyboardInterrupt" in out
    assert "rank 0:" in out and "rank 1:" in out and "time.sleep(600)" in out
    # The same kernel runs the next cell.
    _wait_for_output(_run_new_cell_below(page, "print(6 * 7)"), "42", 20)


# Each lesson's code runs in a browser once, in one edition: their code is the same
# (tests/authoring/test_lessons.py holds it so). tests/test_browser_ja.py runs lesson 01 in
# Notebook 7 and the capstone, 04, in JupyterLab; this file runs the others. (Lesson 01's
# cells up to exercise 1.1 run here too, below.)
RUN_IN_NOTEBOOK_7 = "01"
RUN_IN_JAPANESE = "04"


# Last in this file: the tests above reuse lesson 01's tab, opened by the first.
@pytest.mark.parametrize("lesson", sorted(set(LESSONS) - {RUN_IN_NOTEBOOK_7, RUN_IN_JAPANESE}))
def test_each_lesson_runs_clean_from_the_run_menu(lab, page, shots, lesson):
    base, served = lab
    name = notebook_name(lesson)
    nb = nbformat.read(served / "lessons" / name, as_version=4)
    code = sum(c.cell_type == "code" for c in nb.cells)
    _open(page, base, name)
    _wait_whole(page, len(nb.cells))
    # A hang's detector, not a budget: lesson 05 runs in 35 s on a quiet machine (its
    # torchrun jobs and compiled models), 60 s in this browser under make test's load.
    prompts = _run_all(page, limit=240)
    assert len(prompts) == code
    _assert_ran_clean(_notebook(page).inner_text(), lesson)
    page.screenshot(path=shots / f"{name.removesuffix('.ipynb')}.png")


def _assert_ran_clean(text: str, lesson: str) -> None:
    """The page of a lesson run as handed out: rank lines, every check not attempted."""
    assert "[rank 0]" in text and "[rank 1]" in text
    exercises = exercises_of(lesson)
    for ex in exercises:
        assert f"⏳ Exercise {ex.id}: not attempted yet" in text, ex.id
    core = [ex for ex in exercises if not ex.further]
    if len(core) == len(exercises):
        assert f"Lesson {lesson}: 0 of {len(exercises)} exercises pass" in text
    else:  # Going further's exercises come after the core path's progress cell
        assert f"Lesson {lesson}: 0 of {len(core)} exercises of the core path pass" in text
        assert "Going further (optional): exercise" in text and "below, not started" in text
    assert "✅" not in text and "❌" not in text and "💥" not in text
    assert "Traceback (most recent call last)" not in text
    assert "-" * 40 not in text  # IPython's banner above an error


def test_a_lessons_contents_take_the_reader_to_a_going_further_section(lab, page):
    # Lesson 03's top lists its Going further sections; a click scrolls to the one named.
    base, _ = lab
    _open(page, base, notebook_name("03"))
    # JupyterLab's sanitizer drops the anchor's id, yet it finds the fragment in the cell's
    # markdown and scrolls there (measured: the heading about 100 px from the top).
    _notebook(page).locator("a[href='#further-03-70']").first.click()
    heading = _notebook(page).locator("h3", has_text="What communication costs")
    expect(heading).to_be_in_viewport(timeout=20_000)
