"""Finding submissions and their lessons (grading/orchestration/submissions.py)."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from grading_common import _grade_cli, _sub

from ddp_helpers import grading
from ddp_helpers.grading import (
    ExerciseScore,
    Row,
    Status,
)
from ddp_helpers.grading.orchestration import submissions
from ddp_helpers.procs import with_this_package

# ---------------------------------------------------------------- finding submissions


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _notebook(tmp_path, name, *sources) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    path = tmp_path / name
    nbformat.write(nb, path)
    return path


def test_lesson_is_told_from_the_imports_not_the_name(tmp_path):
    lesson_of = grading.lesson_of
    imports = "from ddp_helpers.exercises import lesson03 as ex"
    assert lesson_of(_notebook(tmp_path, "mine.ipynb", imports)) == ("03", None)
    plain04 = "import ddp_helpers.exercises.lesson04"
    assert lesson_of(_notebook(tmp_path, "a.ipynb", plain04))[0] == "04"
    lesson, why = lesson_of(_notebook(tmp_path, "02_process_group.ipynb", imports))
    assert lesson == "03" and "named like lesson 02" in why
    plain = "import ddp_helpers.exercises.lesson03"
    two = _notebook(tmp_path, "b.ipynb", plain, "from ddp_helpers.exercises import lesson01")
    assert "several lessons (01, 03)" in lesson_of(two)[1]
    unknown = _notebook(tmp_path, "c.ipynb", imports.replace("03", "09"))
    assert "does not have" in lesson_of(unknown)[1]
    (tmp_path / "d.ipynb").write_text('{"cells": 3}')
    assert "not in Jupyter's notebook format" in lesson_of(tmp_path / "d.ipynb")[1]
    (tmp_path / "e.ipynb").write_bytes(b"\xff\xfe binary")
    assert "not UTF-8" in lesson_of(tmp_path / "e.ipynb")[1]


def test_a_lesson_that_imports_an_older_lessons_checks_is_still_itself(tmp_path):
    both = "from ddp_helpers.exercises import lesson02 as ex\n"
    both += "from ddp_helpers.exercises import lesson01"
    assert grading.lesson_of(_notebook(tmp_path, "mine.ipynb", both)) == ("02", None)


def test_lesson_option_makes_other_lessons_invalid(tmp_path):
    _notebook(tmp_path, "x.ipynb", "from ddp_helpers.exercises import lesson03 as ex")
    (sub,) = grading.find_submissions([tmp_path], lesson="01")
    assert sub.problem == submissions.INSTRUCTOR_TEXT["wrong_lesson"].format(
        found="03", wanted="01"
    )


def test_folders_are_searched_and_checkpoints_skipped(tmp_path):
    _notebook(tmp_path, "a.ipynb", "1")
    (tmp_path / "deep" / ".ipynb_checkpoints").mkdir(parents=True)
    _notebook(tmp_path / "deep", "b.ipynb", "2")
    _notebook(tmp_path / "deep" / ".ipynb_checkpoints", "b-checkpoint.ipynb", "2")
    (tmp_path / "notes.txt").write_text("not graded: folders give their notebooks only")
    names = [Path(s.name).name for s in grading.find_submissions([tmp_path, tmp_path / "a.ipynb"])]
    assert names == ["a.ipynb", "b.ipynb"]


def _students(paths, pattern=None) -> dict[str, str]:
    found = grading.find_submissions(
        paths, student_from=None if pattern is None else submissions.student_pattern(pattern)
    )
    return {Path(s.name).as_posix(): s.student for s in found}


def test_the_student_is_the_learners_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _notebook(_mkdir(tmp_path / "subs" / "alice"), "01.ipynb", "1")
    _notebook(_mkdir(tmp_path / "subs" / "bob" / "week1"), "01.ipynb", "1")
    _notebook(_mkdir(tmp_path / "carol"), "01.ipynb", "1")
    assert _students(["subs"]) == {"subs/alice/01.ipynb": "alice", "subs/bob/week1/01.ipynb": "bob"}
    # A learner's folder given itself, or its notebook (as a glob such as subs/*/01.ipynb does)
    assert _students(["carol", "subs/alice/01.ipynb"]) == {
        "carol/01.ipynb": "carol",
        "subs/alice/01.ipynb": "alice",
    }


def test_a_flat_folder_of_many_learners_needs_a_pattern(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    flat = _mkdir(tmp_path / "canvas")
    for name in ("alice_51_01_rank_and_world_size.ipynb", "bob_52_01_rank_and_world_size.ipynb"):
        _notebook(flat, name, "import ddp_helpers.exercises.lesson01")
    assert set(_students(["canvas"]).values()) == {""}  # not "canvas" for both
    named = _students(["canvas"], r"(?P<student>[^/_]+)_\d+_[^/]*$")
    assert sorted(named.values()) == ["alice", "bob"]
    assert sorted(_students(["canvas"], r"_(\d+)_").values()) == ["51", "52"]  # first group
    assert sorted(_students(["canvas"], r"[a-z]+(?=_5)").values()) == ["alice", "bob"]
    assert set(_students(["canvas"], r"^nobody").values()) == {""}


def test_a_bad_student_pattern_is_one_clear_error(tmp_path):
    _notebook(tmp_path, "a.ipynb", "1")
    run = _grade_cli(["a.ipynb", "--student-from", "(unclosed"], cwd=tmp_path)
    assert run.returncode == 2
    assert "--student-from takes a Python regular expression" in run.stderr
    assert "missing ), unterminated subpattern" in run.stderr
    assert not (tmp_path / "grades.csv").exists()


def _merge(tmp_path, *args):
    return subprocess.run(
        [sys.executable, "-m", "ddp_helpers", "merge", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=with_this_package(dict(os.environ)),
    )


GRADES = """submission,student,lesson,status,points,max_points
subs/Alice/01.ipynb,Alice,01,ok,3,4
subs/bob/01.ipynb,bob,01,timeout,1,4
subs/bob/02.ipynb,bob,02,ok,2,2
subs/zed/01.ipynb,zed,01,ok,4,4
flat/x.ipynb,,01,ok,4,4
"""

# The shape of a Canvas gradebook export: a points-possible row, then the learners.
EXPORT = """Student,ID,SIS User ID,SIS Login ID,Section,Lesson 00 (101)
    Points Possible,,,,,4
"Doe, Alice",11,s11,alice,A,4
"Roe, Bob",12,s12,bob,A,3
"Poe, Carl",13,s13,carl,A,
"""


def test_merge_puts_the_points_into_a_gradebook_export(tmp_path):
    (tmp_path / "grades.csv").write_text(GRADES)
    (tmp_path / "export.csv").write_text("\ufeff" + EXPORT)  # Canvas writes a BOM
    args = ["grades.csv", "--into", "export.csv", "--key", "SIS Login ID"]
    args += ["--column", "Lesson 01 (102)", "--lesson", "01", "-o", "import.csv"]
    run = _merge(tmp_path, *args)
    assert run.returncode == 0, run.stderr
    with open(tmp_path / "import.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["Lesson 01 (102)"] for r in rows] == ["", "3", "1", ""]  # case-blind match
    assert [r["Lesson 00 (101)"] for r in rows] == ["4", "4", "3", ""]  # the rest untouched
    assert "not in the gradebook, so not merged: zed" in run.stderr
    assert "1 graded submission(s) have no student: flat/x.ipynb" in run.stderr
    assert "wrote import.csv: 2 learners' points" in run.stderr


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--key", "Login", "--lesson", "01"], "has no column 'Login'; its columns are: Student"),
        (["--key", "SIS Login ID"], "'bob' has 2 graded submissions: subs/bob/01.ipynb"),
    ],
)
def test_a_merge_that_cannot_be_done_writes_nothing_and_says_why(tmp_path, args, words):
    (tmp_path / "grades.csv").write_text(GRADES)
    (tmp_path / "export.csv").write_text(EXPORT)
    run = _merge(
        tmp_path, "grades.csv", "--into", "export.csv", "--column", "L1", "-o", "i.csv", *args
    )
    assert run.returncode == 2 and words in run.stderr
    assert not (tmp_path / "i.csv").exists()


def test_gradescope_extra_cases_at_the_visibility_asked_for():
    from ddp_helpers.grading.outputs import gradescope_json as gradescope

    row = Row(
        _sub("a/01.ipynb"),
        Status.OK,
        [ExerciseScore("1.2", "shard", 1, "wrong", "❌ found by extra cases", "hint", "failed")],
    )
    for visibility in gradescope.VISIBILITIES:
        tests = gradescope.results_json(row, visibility)["tests"]
        assert [t["visibility"] for t in tests] == ["visible", visibility]
        assert "found by extra cases" not in tests[0]["output"] and "hint" not in tests[0]["output"]
        assert tests[1]["output"] == "❌ found by extra cases"
    run = subprocess.run(
        [sys.executable, "-m", "ddp_helpers", "grade", "x", "--hidden-visibility", "soon"],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 2 and "invalid choice: 'soon'" in run.stderr


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["no/such/folder"], "No such file or folder: no/such/folder"),
        (["empty"], "No notebooks (*.ipynb) found in empty"),
        (["empty", "--timeout", "0"], "expected seconds above 0"),
        (["empty", "--jobs", "0"], "--jobs must be 1 or more"),
        (["a.ipynb", "--out", "/proc/no/grades.csv"], "cannot write /proc/no"),
    ],
)
def test_bad_input_gets_one_clear_error(tmp_path, args, words):
    (tmp_path / "empty").mkdir()
    _notebook(tmp_path, "a.ipynb", "from ddp_helpers.exercises import lesson01 as ex")
    run = _grade_cli(args, cwd=tmp_path, timeout=60)
    assert run.returncode == 2
    assert words in run.stderr and "Traceback" not in run.stderr
    assert not (tmp_path / "grades.csv").exists()
