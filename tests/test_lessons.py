"""The lessons as handed out: in sync with the solutions, and they run clean, untouched."""

from __future__ import annotations

import re
import subprocess
import sys

import nbformat
import pytest
from nbclient import NotebookClient

from conftest import ROOT
from ddp_helpers.exercises import LESSONS, exercises_of, notebook_name

LESSON_FILES = sorted((ROOT / "lessons").glob("[0-9][0-9]_*.ipynb"))


def test_every_lesson_of_the_registry_has_its_notebooks_and_nothing_else_does():
    names = [p.name for p in LESSON_FILES]
    assert names == [notebook_name(lesson) for lesson in LESSONS]
    assert names == sorted(p.name for p in (ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))


def test_build_check_passes_on_the_committed_lessons():
    out = subprocess.run(
        [sys.executable, "-m", "ddp_helpers", "build", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert "in sync" in out.stdout


@pytest.mark.parametrize("path", LESSON_FILES, ids=lambda p: p.name[:2])
def test_each_stub_names_the_exercise_whose_function_it_is_in(path):
    exercises = exercises_of(path.name[:2])
    nb = nbformat.read(path, as_version=4)
    stubs = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        current = None
        for line in cell.source.splitlines():
            m = re.match(r"def (\w+)\(", line)
            current = m.group(1) if m else current
            m = re.search(r'raise NotImplementedError\("exercise (\d+\.\d+)"\)', line)
            if m:
                stubs.append((m.group(1), current))
    assert stubs == [(ex.id, ex.name) for ex in exercises]


def _cells_an_answer_can_change(nb, names: list[str]) -> list:
    """The core path, and the Going-further cells that use an exercise's answer.

    The other Going-further cells are the solution's own cells, byte for byte, and use no
    answer: nbval runs them in solutions/, so running them here again proves nothing.
    """
    from ddp_helpers.authoring.pace import GOING_FURTHER

    used = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b")
    kept, further = [], False
    for cell in nb.cells:
        further = further or (cell.cell_type == "markdown" and GOING_FURTHER.search(cell.source))
        if not further or (cell.cell_type == "code" and used.search(cell.source)):
            kept.append(cell)
    return kept


def _run_untouched(path):
    exercises = exercises_of(path.name[:2])
    nb = nbformat.read(path, as_version=4)
    nb.cells = _cells_an_answer_can_change(nb, [ex.name for ex in exercises])
    NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    ).execute()
    return nb


@pytest.fixture(scope="module")
def untouched():
    """Each lesson as handed out, run in a kernel of its own, two at a time."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:
        return dict(zip(LESSON_FILES, pool.map(_run_untouched, LESSON_FILES), strict=True))


@pytest.mark.parametrize("path", LESSON_FILES, ids=lambda p: p.name[:2])
def test_the_untouched_lesson_runs_clean_and_every_check_says_not_attempted(untouched, path):
    exercises = exercises_of(path.name[:2])
    text = ""
    for cell in untouched[path].cells:
        for out in cell.get("outputs", []):
            assert out["output_type"] != "error", f"{out['ename']}: {out['evalue']}"
            text += out.get("text", "")
    for ex in exercises:
        assert f"⏳ Exercise {ex.id}: not attempted yet." in text
    assert "✅" not in text and "❌" not in text and "💥" not in text
    total = len(exercises)
    assert f"Lesson {path.name[:2]}: 0 of {total} exercises pass" in text


@pytest.mark.parametrize("path", LESSON_FILES, ids=lambda p: p.name[:2])
def test_the_estimate_at_the_top_is_what_the_core_path_counts_to(path):
    from ddp_helpers.authoring.pace import TARGET_MINUTES, core_path, stated

    nb = nbformat.read(path, as_version=4)
    counted = core_path(nb)
    assert stated(nb) == (counted.rounded, counted.exercises), (
        f"solutions/{path.name} says {stated(nb)}; its core path counts to {counted} = "
        f"{counted.minutes:.1f} min: write 'about {counted.rounded} minutes' at its top"
    )
    assert counted.rounded <= TARGET_MINUTES, "move material to the Going further section"
    readme = (ROOT / "README.md").read_text()
    assert re.search(rf"`{path.stem}`.*\| {counted.rounded} min \|", readme), "README table"
