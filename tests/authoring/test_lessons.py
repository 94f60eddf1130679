"""The lessons as handed out: in sync with the solutions, stubs and estimates right.

That each runs clean, untouched (every check "not attempted", no error), is tested where
a learner runs it: in JupyterLab, in tests/test_browser.py (02 and 03) and
tests/test_browser_ja.py (04, and 01 in Notebook 7). The Japanese lessons' code is the
English lessons' code and their language cell (tested here), so that each lesson runs in a
browser in one edition only.
"""

from __future__ import annotations

import re
import subprocess
import sys

import nbformat
import pytest

from ddp_helpers.exercises import (
    LESSONS,
    NOTEBOOKS,
    exercises_of,
    lesson_of_notebook,
    notebook_name,
)
from ddp_helpers.stubs import exercise_in
from support import ROOT

LESSON_FILES = sorted((ROOT / "lessons").glob(NOTEBOOKS))


def test_every_lesson_of_the_registry_has_its_notebooks_and_nothing_else_does():
    names = [p.name for p in LESSON_FILES]
    assert names == [notebook_name(lesson) for lesson in LESSONS]
    assert names == sorted(p.name for p in (ROOT / "solutions").glob(NOTEBOOKS))


def test_build_check_passes_on_the_committed_lessons():
    out = subprocess.run(
        [sys.executable, "-m", "ddp_helpers", "build", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert "in sync" in out.stdout


@pytest.mark.parametrize("path", LESSON_FILES, ids=lesson_of_notebook)
def test_each_stub_names_the_exercise_whose_function_it_is_in(path):
    exercises = exercises_of(lesson_of_notebook(path))
    nb = nbformat.read(path, as_version=4)
    stubs = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        current = None
        for line in cell.source.splitlines():
            m = re.match(r"(?:def|class) (\w+)\b", line)  # a class: its methods' stubs too
            current = m.group(1) if m else current
            exercise = exercise_in(line)
            if exercise and (not stubs or stubs[-1] != (exercise, current)):
                stubs.append((exercise, current))
    lesson = str(int(path.name[:2]))
    own = [stub for stub in stubs if stub[0].split(".")[0] == lesson]
    assert own == [(ex.id, ex.name) for ex in exercises]
    # An earlier lesson's answer pasted in again names that exercise, in its own function.
    earlier = {ex.id: ex.name for n in LESSONS if n < path.name[:2] for ex in exercises_of(n)}
    for exercise, function in (stub for stub in stubs if stub not in own):
        assert earlier.get(exercise) == function, f"stub of {exercise} in {function}()"


@pytest.mark.parametrize("path", LESSON_FILES, ids=lesson_of_notebook)
def test_an_exercise_is_marked_further_exactly_when_its_stub_is_in_going_further(path):
    from ddp_helpers.authoring.pace import GOING_FURTHER

    nb = nbformat.read(path, as_version=4)
    further, placed = False, {}
    for cell in nb.cells:
        if cell.cell_type == "markdown" and GOING_FURTHER.search(cell.source):
            further = True
        elif cell.cell_type == "code":
            for line in cell.source.splitlines():
                if exercise_in(line):
                    placed.setdefault(exercise_in(line), further)
    exercises = exercises_of(lesson_of_notebook(path))
    assert {ex.id: ex.further for ex in exercises} == {ex.id: placed[ex.id] for ex in exercises}


@pytest.mark.parametrize("path", LESSON_FILES, ids=lesson_of_notebook)
def test_the_estimate_at_the_top_is_what_the_core_path_counts_to(path):
    from ddp_helpers.authoring.pace import TARGET_MINUTES, lesson_core_path, lesson_counted, stated

    nb = nbformat.read(path, as_version=4)
    counted = lesson_core_path(path.name[:2])  # on the solution: answers and outputs
    assert stated(nb) == (counted.rounded, counted.exercises), (
        f"solutions/{path.name} says {stated(nb)}; its core path counts to {counted} = "
        f"{counted.minutes:.1f} min: write 'about {counted.rounded} minutes' at its top"
    )
    assert counted.rounded <= TARGET_MINUTES, "move material to the Going further section"
    further = lesson_counted(path.name[:2]).further_rounded
    readme = (ROOT / "README.md").read_text()
    row = rf"`{path.stem}`.*\| {counted.rounded} min \| {further} min \|"
    assert re.search(row, readme), "README table: the core path's and Going further's minutes"


@pytest.mark.parametrize("path", LESSON_FILES, ids=lesson_of_notebook)
def test_each_lesson_opens_with_the_set_up_cell_and_badges_only_where_the_repository_is_set(
    path,
):
    from ddp_helpers.authoring.links import repository

    nb = nbformat.read(path, as_version=4)
    tags = [cell.metadata.get("tags", []) for cell in nb.cells]
    repo = repository(ROOT / "pyproject.toml")
    top = [["course-badges"], ["course-setup"]] if repo else [["course-setup"]]
    assert tags[1 : 1 + len(top)] == top, "run `python -m ddp_helpers build`"
    first_code = next(c for c in nb.cells if c.cell_type == "code")
    assert first_code.metadata["tags"] == ["course-setup"]  # before anything imports the course
    text = nbformat.writes(nb) + (ROOT / "README.md").read_text()
    if repo is None:  # no address: no link to nowhere, no install line from nowhere
        for nowhere in ("colab.research.google.com", "kaggle.com/kernels", "git+https"):
            assert nowhere not in text
    else:
        assert repo.colab(f"lessons/{path.name}") in text
        assert repo.kaggle(f"lessons/{path.name}") in text


@pytest.mark.parametrize("path", LESSON_FILES, ids=lesson_of_notebook)
def test_a_japanese_lesson_s_code_is_the_english_lesson_s_after_its_language_cell(path):
    """The same code, cell for cell, its comments and the words it prints aside (the
    stubs say 演習, the set-up cell speaks Japanese)."""
    from ddp_helpers.authoring.same_code import differences

    def code(p):
        return [c.source for c in nbformat.read(p, as_version=4).cells if c.cell_type == "code"]

    english, japanese = code(path), code(path.parent / "ja" / path.name)
    language = [i for i, source in enumerate(japanese) if 'use_language("ja")' in source]
    assert len(language) == 1, "one cell that sets the notebook's language"
    japanese = japanese[: language[0]] + japanese[language[0] + 1 :]
    # The set-up cell (build's, first) is written in the edition's language: the same code
    # with Japanese comments and messages.
    (setup,) = [i for i, source in enumerate(english) if "import ddp_helpers" in source][:1]
    assert japanese[setup] != english[setup] and "本コースのパッケージ" in japanese[setup]
    assert len(japanese) == len(english)
    for index, (en, ja) in enumerate(zip(english, japanese, strict=True)):
        assert differences(en, ja) == [], f"code cell {index}"
    stubs = [s for s in japanese if 'raise NotImplementedError("' in s]
    assert stubs and all('NotImplementedError("演習 ' in s for s in stubs)
