"""`python -m ddp_helpers grade`: statuses, scores, feedback, clean-up, as instructors see them.

One batch of short sample submissions runs end to end, real kernels and all, and covers
every status; the scheduling (the Batch class), the reports and the scorer are tested on
their own, without kernels.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import cloudpickle
import jsonschema
import nbformat
import psutil
import pytest
from fixtures.submissions import ESCAPEE_SECONDS, NAMES, make_submissions

from conftest import SOON, extra_case_lines, processes_under
from ddp_helpers import grading
from ddp_helpers.exercises import exercises_of, lesson01, lesson02
from ddp_helpers.grading import (
    Batch,
    Event,
    ExerciseScore,
    GradeOptions,
    Outcome,
    Row,
    Status,
    Submission,
    TimeBudget,
    reports,
    scorer,
    submissions,
)
from ddp_helpers.procs import with_this_package

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 6  # a short notebook runs in 2-4 s here, two at a time


def _env(tmp: Path, tmpdir: Path | None = None) -> dict:
    tmpdir = tmpdir or tmp / "tmpdir"
    tmpdir.mkdir(exist_ok=True)
    return with_this_package(dict(os.environ, TMPDIR=str(tmpdir)))


def _grade_cli(args, cwd, timeout=600, tmpdir=None):
    return subprocess.run(
        [sys.executable, "-m", "ddp_helpers", "grade", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_env(cwd, tmpdir),
    )


# ---------------------------------------------------------------- one batch, end to end


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    """Every sample submission but the endless loop graded in one batch, two at a time,
    in the sandbox (tests/test_sandbox.py tests what it keeps out).

    (The endless loop costs its limit, twice beside others: it is graded on its own below,
    with --no-sandbox.) TMPDIR is short, so that the batch's folder is made in it.
    """
    tmp = tmp_path_factory.mktemp("grading")
    tmpdir = Path(tempfile.mkdtemp(prefix="ddpt-", dir="/tmp"))
    expected = make_submissions(tmp / "subs")
    expected = {k: v for k, v in expected.items() if not k.startswith("endless_loop/")}
    folders = sorted({f"subs/{name.split('/')[0]}" for name in expected})
    run = _grade_cli(
        [*folders, "--out", "grades.csv", "--feedback", "feedback"]
        + ["--timeout", str(TIMEOUT), "--jobs", "2", "--sandbox"]
        + ["--gradescope", "gradescope", "--report", "report.html"],
        cwd=tmp,
        tmpdir=tmpdir,
    )
    left = processes_under(tmp) + processes_under(tmpdir)
    temporary = list(tmpdir.iterdir())
    shutil.rmtree(tmpdir)
    with open(tmp / "grades.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return {
        "tmp": tmp,
        "expected": expected,
        "run": run,
        "rows": {r["submission"].removeprefix("subs/"): r for r in rows},
        "order": [r["submission"] for r in rows],
        "left": left,
        "temporary": temporary,
    }


def test_batch_exits_cleanly_and_grades_every_submission(batch):
    run = batch["run"]
    assert run.returncode == 0, run.stderr
    assert sorted(batch["rows"]) == sorted(batch["expected"])
    assert batch["order"] == sorted(batch["order"]), "rows are not in submission order"


def test_every_row_has_the_expected_status_and_score(batch):
    wrong = []
    for name, exp in batch["expected"].items():
        row = batch["rows"][name]
        got = (row["lesson"], row["status"], row["points"], row["max_points"])
        want = (
            exp.lesson,
            exp.status,
            str(exp.points),
            "" if exp.max_points is None else str(exp.max_points),
        )
        if got != want:
            wrong.append(f"{name}: got {got}, want {want}")
        for column, points in (exp.per_exercise or {}).items():
            if row[column] != str(points):
                wrong.append(f"{name}: {column} = {row[column]!r}, want {points}")
    assert not wrong, "\n".join(wrong) + "\n" + batch["run"].stderr[-3000:]


def test_csv_has_the_fixed_columns_then_one_per_exercise(batch):
    with open(batch["tmp"] / "grades.csv", newline="") as f:
        header = next(csv.reader(f))
    assert header[:6] == ["submission", "student", "lesson", "status", "points", "max_points"]
    lessons = ("01", "02", "03", "04")  # every lesson but 02 (the endless loop's) is in it
    columns = [
        f"{ex.id} {ex.name}" for lesson in lessons if lesson != "02" for ex in exercises_of(lesson)
    ]
    # The points of each exercise, then (so that those columns stay where they were) each
    # exercise's mistake key.
    assert header[6:] == columns + [f"{c} mistake" for c in columns]
    # A row of lesson 01 leaves the other lessons' exercise columns empty; invalid rows all.
    row = batch["rows"][f"right/{NAMES['01']}"]
    assert row["3.2 params_in_sync"] == "" and row["1.2 shard"] == "1"
    assert all(batch["rows"]["not_a_lesson/scratch.ipynb"][h] == "" for h in header[6:])


def _mistakes_of(batch, name) -> dict[str, str]:
    row = batch["rows"][name]
    return {ex.id: row[f"{ex.id} {ex.name} mistake"] for ex in exercises_of(row["lesson"])}


def test_csv_names_each_exercises_mistake_by_its_key(batch):
    def mistakes(name):
        return _mistakes_of(batch, name)

    assert set(mistakes(f"right/{NAMES['04']}").values()) == {""}
    assert mistakes(f"partly_wrong/{NAMES['01']}") == {
        "1.1": "",
        "1.2": "",
        "1.3": "reduce_local",
        "1.4": "not_attempted",
    }
    assert mistakes(f"fools_the_check/{NAMES['01']}")["1.2"] == "shard_other"  # extra cases
    assert set(mistakes(f"tampering/{NAMES['01']}").values()) == {"from_course"}
    assert mistakes(f"exits/{NAMES['03']}")["3.3"] == "missing"  # the kernel died before


def test_no_process_or_temporary_folder_is_left(batch):
    assert not batch["left"], f"left running after grading: {batch['left']}"
    assert not batch["temporary"], f"left in TMPDIR: {batch['temporary']}"


# The endless loop's limit: time for the kernel to start and import torch (over 2 s on a slow
# 2-core machine) and to run the cells before the loop, so that the loop is where it stops.
ENDLESS_LIMIT = "8"


@pytest.fixture(scope="module")
def endless(tmp_path_factory):
    """The endless loop, graded on its own with a short limit, without the sandbox."""
    tmp = tmp_path_factory.mktemp("endless")
    make_submissions(tmp / "subs")
    run = _grade_cli(
        ["subs/endless_loop", "--feedback", "feedback", "--timeout", ENDLESS_LIMIT, "--gradescope"]
        + ["gs"]
        + ["--no-sandbox"],
        cwd=tmp,
    )
    rows = list(csv.DictReader(open(tmp / "grades.csv", newline="")))
    text = (tmp / "feedback" / f"subs__endless_loop__{NAMES['02'][:-6]}.md").read_text()
    gradescope = json.loads((tmp / "gs" / "results.json").read_text())
    return {
        "run": run,
        "rows": rows,
        "feedback": text,
        "gradescope": gradescope,
        "left": processes_under(tmp),
        "escapees": _escapees_of(tmp),
    }


def _escapees_of(tmp: Path) -> list[psutil.Process]:
    """The endless loop's `sleep` of its own session, if it outlived the run in tmp. Not any
    such sleep: the autograder's test starts one too, in another worker at the same time. A
    kernel's HOME is a folder of the worker's, under the TMPDIR the run in tmp was given."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if p.info["cmdline"] == ["sleep", ESCAPEE_SECONDS]:
                if Path(p.environ().get("HOME", "/")).is_relative_to(tmp):
                    found.append(p)
        except (psutil.Error, OSError):
            continue
    return found


def test_a_notebook_past_its_limit_is_a_timeout_and_keeps_earlier_answers(endless):
    assert endless["run"].returncode == 0, endless["run"].stderr
    (row,) = endless["rows"]
    assert (row["status"], row["points"], row["2.1 pick_backend"]) == ("timeout", "1", "1")
    assert row["2.4 average_gradients"] == "0"


def test_feedback_of_a_timeout_shows_where_it_was_stuck(endless):
    text = endless["feedback"]
    assert f"stopped after {ENDLESS_LIMIT} s" in text
    assert "launch(spin, nprocs=2)" in text and "KeyboardInterrupt" in text
    assert "`average_gradients` is not defined" in text


def test_a_timeout_leaves_nothing_even_what_escaped_into_its_own_session(endless):
    assert not endless["left"], f"left running after grading: {endless['left']}"
    escapees = endless["escapees"]
    assert not escapees, "the process the endless loop started in its own session survived"


def test_progress_lines_and_summary_are_printed(batch):
    err = batch["run"].stderr
    count = len(batch["expected"])
    assert f"Grading {count} submissions, 2 at a time; each notebook may run {TIMEOUT} s" in err
    assert f"[{count}/{count}]" in err and f"subs/right/{NAMES['04']}" in err
    assert "status: ok 6 · timeout 0 · error 1 · invalid 3" in err
    # 1.2 shard passes in right, partly_wrong and japanese, of the five lesson-01 runs
    assert "1.2 shard" in err and "0.60 of 1  (n=5)" in err
    assert "s per notebook run, 2 at a time)" in err


def _feedback(batch, name: str) -> str:
    stem = "subs__" + name.removesuffix(".ipynb").replace("/", "__")
    return (batch["tmp"] / "feedback" / f"{stem}.md").read_text()


def test_a_feedback_file_for_every_submission(batch):
    files = sorted(p.name for p in (batch["tmp"] / "feedback").iterdir())
    assert len(files) == len(batch["expected"]) and all(f.endswith(".md") for f in files)


def test_feedback_of_a_partly_wrong_submission_says_what_and_hints(batch):
    text = _feedback(batch, f"partly_wrong/{NAMES['01']}")
    assert f"**2 of {len(lesson01.EXERCISES)} points**" in text
    assert lesson01.MESSAGES["reduce_local"].format(got=[1, 2, 3]) in text
    assert f"💡 Hint: {lesson01.q3.hints['reduce_sum']}" in text
    assert "not attempted yet" in text  # 1.4 was left as the build's stub


def test_a_japanese_submission_gets_its_feedback_and_gradescope_output_in_japanese(batch):
    from ddp_helpers import i18n
    from ddp_helpers.grading.reports import FEEDBACK

    name = f"japanese/{NAMES['01']}"
    assert _mistakes_of(batch, name)["1.4"] == "gather_shape"
    text = _feedback(batch, name)
    tests = {t["name"]: t for t in _gradescope(batch, name)["tests"]}
    with i18n.using("ja"):
        said = lesson01.MESSAGES["gather_shape"]
        hint = FEEDBACK["hint"].format(hint=lesson01.q4.hints["gather_all"])
        title = FEEDBACK["title"].format(name=f"subs/{name}")
    assert said in text and hint in text and title in text
    assert said in tests["1.4 predict_all_gather"]["output"]
    assert lesson01.MESSAGES["gather_shape"] not in text  # the English one
    # ... while an English submission's feedback stays English
    assert "Lesson 01 ·" not in text and "Hint:" not in text
    assert "Hint:" in _feedback(batch, f"partly_wrong/{NAMES['01']}")


def test_output_on_stderr_and_warnings_cost_nothing(batch):
    # partly_wrong is also the noisy one: warnings, stderr, a rank writing to stderr
    assert batch["rows"][f"partly_wrong/{NAMES['01']}"]["1.1 gpu_for_this_rank"] == "1"


def test_feedback_of_a_dead_kernel_gives_the_exit_code(batch):
    text = _feedback(batch, f"exits/{NAMES['03']}")
    assert "The kernel died (exit code 3) while running code cell" in text
    assert "Ctrl-C will not work" not in text  # ipykernel's banner is not the learner's


def test_tampering_in_the_kernel_gains_nothing(batch):
    text = _feedback(batch, f"tampering/{NAMES['01']}")
    assert text.count("is the course's reference answer") == len(lesson01.EXERCISES)
    assert "faked" not in text


@pytest.mark.parametrize(
    ("name", "words"),
    [
        (f"malformed/{NAMES['01']}", "broken JSON at line"),
        (f"other_lesson/{NAMES['01']}", "named like lesson 01 but holds lesson 02"),
        ("not_a_lesson/scratch.ipynb", "not one of the course's lessons"),
    ],
)
def test_feedback_of_an_invalid_submission_says_why(batch, name, words):
    text = _feedback(batch, name)
    assert "**Status: invalid.**" in text and words in text


# ---------------------------------------------------------------- for an LMS and Gradescope

SCHEMA = json.loads(
    (Path(__file__).parent / "fixtures" / "gradescope_results.schema.json").read_text()
)


def _gradescope(batch, name: str) -> dict:
    stem = "subs__" + name.removesuffix(".ipynb").replace("/", "__")
    return json.loads((batch["tmp"] / "gradescope" / stem / "results.json").read_text())


def test_the_csv_names_each_learner_by_their_folder(batch):
    for name, row in batch["rows"].items():
        assert row["student"] == name.split("/")[0]


def test_gradescope_results_match_the_specification_and_the_csv(batch):
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    validator = jsonschema.Draft202012Validator(SCHEMA)
    files = sorted((batch["tmp"] / "gradescope").glob("*/results.json"))
    assert len(files) == len(batch["expected"])
    for name, row in batch["rows"].items():
        data = _gradescope(batch, name)
        validator.validate(data)
        assert data["score"] == float(row["points"])
        assert sum(t["score"] for t in data["tests"]) == data["score"]
        if row["status"] != "invalid":
            assert sum(t["max_score"] for t in data["tests"]) == float(row["max_points"])


def test_gradescope_shows_the_extra_cases_only_once_published(batch):
    tests = {t["name"]: t for t in _gradescope(batch, f"fools_the_check/{NAMES['01']}")["tests"]}
    shown = tests["1.2 shard"]
    assert (shown["score"], shown["status"], shown["visibility"]) == (0.0, "failed", "visible")
    assert "shown when grades are published" in shown["output"]
    assert "beyond those the check shows" not in shown["output"]
    extra = tests["1.2 shard: the grader's extra cases"]
    assert (extra["status"], extra["visibility"]) == ("failed", "after_published")
    assert "beyond those the check shows" in extra["output"]
    assert tests["1.1 gpu_for_this_rank: the grader's extra cases"]["status"] == "passed"
    # The mistake's key goes with the test that tells it: the extra cases' once published.
    assert shown["extra_data"] == {"mistake": None}
    assert extra["extra_data"] == {"mistake": "shard_other"}


def test_gradescope_tests_carry_the_mistakes_key(batch):
    tests = {t["name"]: t for t in _gradescope(batch, f"partly_wrong/{NAMES['01']}")["tests"]}
    assert tests["1.3 predict_all_reduce"]["extra_data"] == {"mistake": "reduce_local"}
    assert tests["1.4 predict_all_gather"]["extra_data"] == {"mistake": "not_attempted"}
    assert tests["1.2 shard"]["extra_data"] == {"mistake": None}  # correct


def test_no_output_holds_the_code_of_the_extra_cases(batch):
    lines = extra_case_lines()
    assert lines  # the extra cases have code to leak
    outputs = [
        *(batch["tmp"] / "gradescope").rglob("*.json"),
        *(batch["tmp"] / "feedback").iterdir(),
    ]
    outputs.append(batch["tmp"] / "report.html")
    for path in outputs:
        text = path.read_text()
        assert not [line for line in lines if line in text], path


def test_a_timeout_still_writes_gradescope_results_that_say_why(endless):
    data = endless["gradescope"]
    jsonschema.Draft202012Validator(SCHEMA).validate(data)
    notebook = data["tests"][0]
    assert (notebook["name"], notebook["status"]) == ("Notebook", "failed")
    assert "ran past the time limit" in notebook["output"]
    assert f"stopped after {ENDLESS_LIMIT} s" in notebook["output"]
    assert "KeyboardInterrupt" in notebook["output"]
    assert data["score"] == 1.0


# ---------------------------------------------------------------- the class report


def test_the_class_report_counts_outcomes_and_names_the_mistakes(batch):
    from html.parser import HTMLParser

    class Text(HTMLParser):
        def __init__(self):
            super().__init__()
            self.parts = []

        def handle_data(self, data):
            self.parts.append(data)

    html = (batch["tmp"] / "report.html").read_text()
    page = Text()
    page.feed(html)
    text = " ".join(" ".join(page.parts).split()).replace(" : ", ": ")
    ran01 = sum(1 for e in batch["expected"].values() if e.lesson == "01" and e.status != "invalid")
    assert f"Lesson 01 ({ran01} submissions that ran)" in text
    counted = _mistakes_counted(html)
    # tampering sent the course's own answers: that mistake on every exercise
    for ex in lesson01.EXERCISES:
        assert counted[f"{ex.id} {ex.name}"]["from_course"] == f"1 of {ran01}", ex.id
    assert counted["1.3 predict_all_reduce"]["reduce_local"] == f"1 of {ran01}"  # partly_wrong
    assert counted["1.4 predict_all_gather"]["not_attempted"] == f"1 of {ran01}"  # partly_wrong
    assert counted["1.2 shard"]["shard_other"] == f"1 of {ran01}"  # fools_the_check's extra cases
    # each shown by its title
    assert f"1 of {ran01}: {lesson01.q3.title('reduce_local')} reduce_local" in text
    assert "Time per submission" in text


def _mistakes_counted(html: str) -> dict[str, dict[str, str]]:
    """The class report's mistakes: exercise column -> key -> "k of n"."""
    from html.parser import HTMLParser

    class Mistakes(HTMLParser):
        def __init__(self):
            super().__init__()
            self.found, self.column, self.key, self.tag = {}, None, None, None

        def handle_starttag(self, tag, attrs):
            self.tag = tag
            if tag == "li" and dict(attrs).get("data-mistake"):
                self.key = dict(attrs)["data-mistake"]

        def handle_data(self, data):
            if self.tag == "h3":
                self.column = data.removesuffix(": what went wrong")
            elif self.tag == "b" and self.key is not None:
                self.found.setdefault(self.column, {})[self.key] = data
                self.key = None

    parser = Mistakes()
    parser.feed(html)
    return parser.found


def test_the_class_report_reads_in_a_browser_with_no_broken_images(batch, tmp_path):
    from browser import browser

    with browser() as b:
        page = b.new_page(viewport={"width": 1100, "height": 900})
        page.goto((batch["tmp"] / "report.html").as_uri())
        images = page.evaluate(
            "Array.from(document.images).map(i => [i.complete, i.naturalWidth, i.alt])"
        )
        headings = page.locator("h2").all_inner_texts()
        page.screenshot(path=tmp_path / "report.png", full_page=True)
    lessons = [h for h in headings if h.startswith("Lesson")]
    assert len(images) == len(lessons) + 1  # a plot per lesson, and the times
    assert all(done and width > 300 and alt for done, width, alt in images), images
    assert "Time per submission" in headings and "Submissions" in headings


def test_every_mistake_a_score_can_carry_has_a_short_title_in_the_report():
    """A new check's mistakes appear in the report with no code: by their own titles."""
    from ddp_helpers.exercises import LESSONS
    from ddp_helpers.exercises._core import RANK_MISTAKES
    from ddp_helpers.grading import class_report

    core = ["not_attempted", "not_attempted_other", "not_attempted_pasted", "error", "missing"]
    grader = [k.removesuffix(".title") for k in scorer.MESSAGES if k.endswith(".title")]
    raised = {"exception": "ValueError"}  # what an error's title names
    for lesson in LESSONS:
        for ex in exercises_of(lesson):
            for key in [*ex.mistakes, *RANK_MISTAKES, *core, *grader]:
                score = ExerciseScore(ex.id, ex.name, 1, "wrong", mistake=key, fields=raised)
                title = class_report.title_of(lesson, score)
                assert title and len(title) <= 60 and "{" not in title, (ex.id, key, title)


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
    from ddp_helpers.grading import gradescope

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


# ---------------------------------------------------------------- the batch, as logic


def _sub(name: str, lesson: str = "01") -> Submission:
    return Submission(Path(name), name, lesson)


def _row(sub: Submission, status: Status, seconds: float = 1.0, right: bool = True) -> Row:
    scores = [
        ExerciseScore(e.id, e.name, e.points, "correct" if right else "not_attempted")
        for e in exercises_of(sub.lesson)
    ]
    return Row(sub, status, scores, [], seconds)


def test_the_batch_takes_submissions_in_order_and_knows_how_crowded_each_ran():
    written = []
    batch = Batch(
        [_sub("a"), Submission(Path("bad"), "bad", problem="x"), _sub("b")], written.append
    )
    a, b = batch.take(), batch.take()
    assert (a.name, b.name, batch.take()) == ("a", "b", None)  # the invalid one is not queued
    assert batch.running == {"a": 2, "b": 2}
    assert batch.settle(_row(a, Status.OK)).status is Status.OK and written[-1].submission is a
    assert batch.running == {"b": 2}


def test_a_timeout_in_a_crowd_is_held_and_graded_again_alone():
    written = []
    batch = Batch([_sub("a"), _sub("b")], written.append)
    a, b = batch.take(), batch.take()
    batch.settle(_row(a, Status.OK))
    assert batch.settle(_row(b, Status.TIMEOUT, seconds=5.0, right=False)) is None  # held
    assert [r.submission.name for r in written] == ["a"]
    assert batch.retry_alone() == 1
    again = batch.take()
    assert again.name == "b" and batch.running == {"b": 1}
    final = batch.settle(_row(again, Status.OK, seconds=2.0))
    assert final.status is Status.OK and final.points == len(lesson01.EXERCISES)
    assert final.seconds == 7.0  # both tries count
    assert final.events[0].kind == "retried" and "(5.0 s in all)" in final.events[0].text
    assert "while 1 other submission shared the machine" in final.events[0].text


def test_a_timeout_alone_or_on_the_second_try_is_final():
    written = []
    batch = Batch([_sub("a")], written.append)
    a = batch.take()
    assert batch.settle(_row(a, Status.TIMEOUT)).status is Status.TIMEOUT  # it ran alone
    batch = Batch([_sub("a"), _sub("b")], written.append)
    batch.take(), batch.take()
    batch.settle(_row(_sub("a"), Status.TIMEOUT))  # held: b ran beside it
    batch.settle(_row(_sub("b"), Status.OK))
    batch.retry_alone()
    batch.take()
    assert batch.settle(_row(_sub("a"), Status.TIMEOUT)).status is Status.TIMEOUT


def test_interrupted_before_the_second_try_the_first_tries_row_is_written():
    written = []
    batch = Batch([_sub("a"), _sub("b")], written.append)
    batch.take(), batch.take()
    batch.settle(_row(_sub("a"), Status.TIMEOUT))
    batch.give_up_retries()
    assert written[-1].status is Status.TIMEOUT
    assert "interrupted before it could be graded again alone" in written[-1].events[0].text


def _three_copies(tmp_path) -> list[str]:
    for who in ("a", "b", "c"):
        (tmp_path / who).mkdir()
        (tmp_path / who / NAMES["01"]).write_text(
            nbformat.writes(_notebook_of("from ddp_helpers.exercises import lesson01 as ex"))
        )
    return [str(tmp_path / who) for who in ("a", "b", "c")]


def _notebook_of(*sources):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    return nb


def _fake(slow: str, always: bool = False, seconds: float = 0.3, ctrl_c: str | None = None):
    """A grader in place of the worker: `slow` times out when another submission runs beside
    it (or always); grading `ctrl_c` presses Ctrl-C. Records (name, crowd) per call."""
    import _thread
    import threading

    lock, running, calls = threading.Lock(), [0], []

    def fake(sub, budget, cancel=None, tmp_root=None):
        if ctrl_c is not None and sub.name.startswith(ctrl_c):
            while not any(name.startswith(slow) for name, _ in calls):
                time.sleep(0.01)
            time.sleep(0.5)  # the grader has taken in slow's first try
            _thread.interrupt_main()
            cancel.wait(10)  # as the real one does, it stops when the grader says so
        with lock:
            running[0] += 1
        crowd = running[0]
        time.sleep(seconds)
        with lock:
            crowd = max(crowd, running[0])
            running[0] -= 1
        calls.append((sub.name, crowd))
        timed_out = sub.name.startswith(slow) and (crowd > 1 or always)
        status = Status.TIMEOUT if timed_out else Status.OK
        return _row(sub, status, seconds, right=not timed_out)

    fake.calls = calls
    return fake


def _grade_three(tmp_path, jobs: int, err, fake) -> list:
    options = GradeOptions(
        out=tmp_path / "g.csv", feedback=tmp_path / "fb", jobs=jobs, budget=TimeBudget(notebook=5)
    )
    return grading.grade(_three_copies(tmp_path), options, stream=err, grade_one=fake)


def test_grade_retries_a_crowded_timeout_alone_and_writes_its_second_row(tmp_path):
    fake = _fake(slow=str(tmp_path / "b"))
    err = io.StringIO()
    rows = _grade_three(tmp_path, 2, err, fake)
    b = [c for c in fake.calls if c[0].startswith(str(tmp_path / "b"))]
    assert [crowd for _, crowd in b] == [2, 1], fake.calls  # beside a, then alone
    assert [r.status for r in rows] == [Status.OK] * 3
    assert "1 submission ran past the limit while others were being graded; grading it again" in (
        err.getvalue()
    )
    csv_rows = list(csv.DictReader(open(tmp_path / "g.csv", newline="")))
    assert [r["status"] for r in csv_rows] == ["ok", "ok", "ok"]
    feedback = "\n".join(p.read_text() for p in (tmp_path / "fb").iterdir())
    assert feedback.count("so it was graded again alone") == 1


def test_ctrl_c_before_the_second_try_keeps_the_first_and_restores_the_handlers(tmp_path):
    # a and b run together and b times out; Ctrl-C comes while c runs, before b's retry.
    fake = _fake(slow=str(tmp_path / "b"), ctrl_c=str(tmp_path / "c"))
    handlers = {
        sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    }
    err = io.StringIO()
    try:
        with pytest.raises(KeyboardInterrupt):
            _grade_three(tmp_path, 2, err, fake)
        after = {sig: signal.getsignal(sig) for sig in handlers}
    finally:
        for sig, handler in handlers.items():  # so that a failure here spares later tests
            signal.signal(sig, handler)
    assert after == handlers, "grade() left Ctrl-C, SIGTERM or SIGHUP ignored"
    rows = list(csv.DictReader(open(tmp_path / "g.csv", newline="")))
    assert [(Path(r["submission"]).parent.name, r["status"]) for r in rows] == [
        ("a", "ok"),
        ("b", "timeout"),
    ]
    assert "Interrupted: 2 of 3 graded" in err.getvalue()
    text = "\n".join(p.read_text() for p in (tmp_path / "fb").iterdir())
    assert "the batch was interrupted before it could be graded again alone" in text


# ---------------------------------------------------------------- reports, as logic


def test_the_worker_outcome_survives_its_json_line():
    outcome = Outcome(
        Status.TIMEOUT,
        [ExerciseScore("1.2", "shard", 1, "wrong", "❌ no", "a hint", None, "shard_other", {})],
        [Event("timeout", "stopped", "Traceback ...", cell=3)],
        4.5,
        1.25,
    )
    assert Outcome.from_json(pickle.loads(pickle.dumps(outcome.to_json()))) == outcome


def test_csv_cells_of_a_graded_and_an_invalid_row():
    columns = [("01", "1.1 gpu_for_this_rank"), ("01", "1.2 shard"), ("02", "2.1 pick_backend")]
    sub = dataclasses.replace(_sub("x.ipynb"), student="alice")
    row = Row(
        sub,
        Status.OK,
        [
            ExerciseScore("1.1", "gpu_for_this_rank", 1, "correct"),
            ExerciseScore("1.2", "shard", 1, "wrong", mistake="shard_blocks"),
        ],
    )
    fixed = ["x.ipynb", "alice", "01", "ok", 1, 2]
    assert reports.csv_cells(row, columns) == [*fixed, 1, 0, "", "", "shard_blocks", ""]
    bad = Row.invalid(Submission(Path("y"), "y", problem="broken"))
    assert reports.csv_cells(bad, columns) == ["y", "", "", "invalid", 0, "", *[""] * 6]


def test_feedback_shows_the_score_each_message_and_what_happened():
    sub = _sub("alice/01.ipynb")
    errors = [Event("cell_error", f"Code cell {n} raised X", "detail", n) for n in range(7)]
    row = Row(
        sub,
        Status.TIMEOUT,
        [ExerciseScore("1.2", "shard", 1, "wrong", "❌ Exercise 1.2: not yet.", "deal them")],
        [Event("timeout", "The notebook was stopped", "KeyboardInterrupt"), *errors],
        12.0,
        10.0,
        2.0,
    )
    text = reports.feedback_markdown(row, 30)
    assert "**0 of 1 points** · status **timeout**" in text
    assert "| 1.2 `shard` | 0 / 1 | ❌ wrong |" in text and "💡 Hint: deal them" in text
    assert "## What happened\n\nThe notebook was stopped\n\n```\nKeyboardInterrupt" in text
    assert text.count("Code cell") == 5 and "(and 2 more)" in text
    assert "Times: notebook 10.0 s, checks 2.0 s." in text


def test_the_summary_counts_statuses_and_means_per_exercise():
    a = Row(_sub("a"), Status.OK, [ExerciseScore("1.2", "shard", 1, "correct")], seconds=2.0)
    b = Row(_sub("b"), Status.ERROR, [ExerciseScore("1.2", "shard", 1, "error")], seconds=4.0)
    lines = reports.summary([a, b], [("01", "1.2 shard")], 5.0, 2)
    assert lines[0] == "Graded 2 submissions in 5 s (3.0 s per notebook run, 2 at a time)."
    assert lines[1] == "status: ok 1 · timeout 0 · error 1 · invalid 0"
    assert "1.2 shard" in lines[3] and "0.50 of 1  (n=2)" in lines[3]


def test_progress_bar_on_a_terminal():
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    stream = Terminal()
    progress = reports.Progress(4, stream)
    sub = _sub("x.ipynb")
    progress.running = 1
    progress.finished(_row(sub, Status.OK, seconds=2.0))
    total = len(lesson01.EXERCISES)
    assert f"[1/4] ok         {total}/{total}    2.0 s  x.ipynb" in stream.getvalue()
    assert "[" + "#" * 8 + "." * 22 + "] 1/4 · 1 running" in stream.getvalue()
    plain = io.StringIO()
    reports.Progress(4, plain).finished(_row(sub, Status.OK, seconds=2.0))
    assert "\x1b" not in plain.getvalue() and "#" not in plain.getvalue()


def test_feedback_files_never_share_a_name():
    subs = [
        Submission(Path(n), n)
        for n in ["a b.ipynb", "a_b.ipynb", "x/y__z.ipynb", "x__y/z.ipynb", "q" * 300 + ".ipynb"]
    ]
    names = reports.feedback_names(subs)
    assert len(set(names.values())) == len(subs)
    assert all(len(n) <= 130 and n.endswith(".md") for n in names.values())


# ---------------------------------------------------------------- the checks it uses


def test_hidden_cases_catch_what_the_visible_check_misses():
    def shard(n, rank, world_size):  # right for the world sizes the check shows, only
        return lesson01.shard(n, rank, world_size) if world_size <= 5 else [rank]

    assert lesson01.q2.evaluate(shard).passed
    result = lesson01.q2.grade(shard)
    assert result.status == "wrong" and "grader's extra cases" in result.message
    assert lesson01.q2.grade(lesson01.shard).passed


def test_an_answer_equal_to_everything_is_not_right():
    class Anything:
        def __eq__(self, other):
            return True

        def __ne__(self, other):
            return False

    assert lesson02.q1.grade(lambda: Anything()).status == "wrong"


def test_the_reference_wrapped_in_a_partial_is_still_the_reference():
    import functools

    assert scorer.from_course(functools.partial(lesson01.shard)) == "ddp_helpers.exercises.lesson01"
    assert scorer.from_course(functools.wraps(lesson01.shard)(lambda *a: 0)) is not None
    assert scorer.from_course(lambda n, rank, world_size: [rank]) is None


# ---------------------------------------------------------------- the scorer alone


def _answers(tmp_path, **answers) -> str:
    path = tmp_path / "answers.pkl"
    path.write_bytes(pickle.dumps({k: ("ok", cloudpickle.dumps(v)) for k, v in answers.items()}))
    for sub in ("tmp", "score"):
        (tmp_path / sub).mkdir(exist_ok=True)
    return str(path)


def _score(tmp_path, path, limit):
    env = with_this_package(dict(os.environ, TMPDIR=str(tmp_path / "tmp")))
    scores, events = scorer.score(path, "01", str(tmp_path), env, limit)
    return {s.id: s for s in scores}, events


def test_an_answer_that_hangs_the_check_is_stopped_and_the_rest_still_scored(tmp_path):
    def shard(n, rank, world_size):
        while True:
            pass

    path = _answers(tmp_path, shard=shard, predict_all_reduce=lambda: [6, 6, 6])
    scores, events = _score(tmp_path, path, limit=1.5)
    assert (
        scores["1.2"].status == "error" and "did not finish within 1.5 s" in scores["1.2"].message
    )
    assert scores["1.2"].mistake == "check_timeout" and scores["1.4"].mistake == "missing"
    assert scores["1.3"].status == "correct"
    assert scores["1.4"].status == "missing"
    assert [e.kind for e in events] == ["check_timeout"]


def test_an_answer_that_kills_the_scorer_costs_only_itself(tmp_path):
    def predict_all_reduce():
        os._exit(9)

    path = _answers(
        tmp_path, predict_all_reduce=predict_all_reduce, predict_all_gather=lambda: [[0, 1, 2]] * 3
    )
    scores, events = _score(tmp_path, path, limit=30)
    assert scores["1.3"].status == "error"
    assert scores["1.3"].message == scorer.MESSAGES["check_died"].format(how="exit code 9")
    assert scores["1.3"].mistake == "check_died" and scores["1.4"].mistake is None
    assert scores["1.4"].status == "correct" and scores["1.2"].status == "missing"
    assert [e.kind for e in events] == ["check_died"]


def test_an_answer_that_forks_cannot_hold_the_scorer(tmp_path):
    def predict_all_reduce():
        if os.fork() == 0:  # a child that keeps the result pipe open
            time.sleep(60)
            os._exit(0)
        return [6, 6, 6]

    path = _answers(tmp_path, predict_all_reduce=predict_all_reduce)
    started = time.monotonic()
    scores, events = _score(tmp_path, path, limit=20)
    assert time.monotonic() - started < 15
    assert scores["1.3"].status == "correct" and not events


# ---------------------------------------------------------------- stopping, end to end


def _alive(procs: list) -> list:
    alive = []
    for p in procs:
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                alive.append(p)
        except psutil.NoSuchProcess:
            continue
    return alive


def test_supervise_stops_at_the_deadline_and_stop_tree_ends_what_the_child_started():
    from ddp_helpers.procs import stop_tree, supervise

    # A child that starts a grandchild in a session of its own, then never finishes its work.
    code = "import subprocess, time\n"
    code += "subprocess.Popen(['sleep', '61'], start_new_session=True)\ntime.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", code])
    started, watched = time.monotonic(), []

    def never_done(wait: float) -> bool:
        time.sleep(wait)
        return False

    ended = supervise(proc, never_done, lambda: started + 2.0, lambda: watched.append(1))
    assert ended == "late" and 2.0 <= time.monotonic() - started < 2.0 + SOON and len(watched) >= 5
    tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    assert [p.cmdline() for p in tree[1:]] == [["sleep", "61"]]
    stop_tree(proc)
    assert not _alive(tree)
    quick = subprocess.Popen([sys.executable, "-c", "pass"])
    assert supervise(quick, never_done, lambda: time.monotonic() + 30) == "exited"


def _wait_for_kernel_of(proc, words: str, seconds: float = 60) -> int | None:
    """The pid of the grader's worker whose command line has `words`, once its kernel runs."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for p in psutil.Process(proc.pid).children():
            try:
                if words in " ".join(p.cmdline()) and any(
                    "ipykernel" in " ".join(c.cmdline()) for c in p.children()
                ):
                    return p.pid
            except psutil.Error:
                continue
        time.sleep(0.2)
    return None


def test_ctrl_c_stops_the_batch_and_everything_it_started(tmp_path):
    make_submissions(tmp_path / "subs")
    proc = subprocess.Popen(
        [sys.executable, "-m", "ddp_helpers", "grade", "subs/endless_loop", "subs/malformed"]
        + ["--no-sandbox"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(tmp_path),
    )
    assert _wait_for_kernel_of(proc, "endless_loop") is not None
    time.sleep(1)  # into the notebook
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Interrupted: 1 of 2 graded" in err
    rows = list(csv.DictReader(open(tmp_path / "grades.csv", newline="")))
    assert [r["status"] for r in rows] == ["invalid"]
    assert not processes_under(tmp_path)
    assert not list((tmp_path / "tmpdir").iterdir())


def _submission_cgroups(grader_pid: int) -> set:
    """The cgroups a grader of that pid made and left (none where limits are rlimits)."""
    from ddp_helpers.grading.sandbox import choose

    dirs = choose(False, None, None).limits.folders("x")
    return {p for d in dirs.values() for p in d.parent.glob(f"ddp-grade-{grader_pid}-*")}


def test_a_worker_killed_from_outside_costs_its_row_only_and_leaves_nothing(tmp_path):
    make_submissions(tmp_path / "subs")
    proc = subprocess.Popen(
        [sys.executable, "-m", "ddp_helpers", "grade", "subs/endless_loop", "subs/malformed"]
        + ["--timeout", "60", "--feedback", "feedback", "--no-sandbox"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(tmp_path),
    )
    worker_pid = _wait_for_kernel_of(proc, "endless_loop")
    assert worker_pid is not None, "the endless loop's worker and kernel did not start"
    time.sleep(1.5)  # its kernel is in the loop, with two ranks
    os.kill(worker_pid, signal.SIGKILL)  # as the out-of-memory killer would
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    rows = {r["submission"]: r for r in csv.DictReader(open(tmp_path / "grades.csv"))}
    assert rows[f"subs/endless_loop/{NAMES['02']}"]["status"] == "error"
    assert rows[f"subs/malformed/{NAMES['01']}"]["status"] == "invalid"  # and the batch went on
    text = (tmp_path / "feedback" / f"subs__endless_loop__{NAMES['02'][:-6]}.md").read_text()
    assert "was killed by SIGKILL from outside" in text
    assert not processes_under(tmp_path)
    assert not list((tmp_path / "tmpdir").iterdir())
    assert not _submission_cgroups(proc.pid)  # the killed worker's cgroups were removed


def test_the_workers_plain_reading_of_code_cells_matches_nbformat():
    import nbformat

    for path in sorted(ROOT.glob("*/0*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        want = [c.source for c in nb.cells if c.cell_type == "code"]
        assert submissions.code_sources(path) == want, path


def test_nbformat_imported_quickly_still_validates_and_leaves_the_iri_checker_importable():
    code = (
        "import sys\n"
        "from ddp_helpers.nbformat_quick import nbformat\n"
        "nb = nbformat()\n"
        "nb.validate(nb.v4.new_notebook())\n"
        "bad = nb.v4.new_notebook(); bad.cells = [{'cell_type': 'code'}]\n"
        "try:\n"
        "    nb.validate(bad)\n"
        "except nb.ValidationError:\n"
        "    print('rejected')\n"
        "print('slow grammar imported:', 'rfc3987_syntax' in sys.modules)\n"
        "import rfc3987_syntax\n"
        "print(rfc3987_syntax.is_valid_syntax('iri', 'https://example.org/a'))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=with_this_package(dict(os.environ)),
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["rejected", "slow grammar imported: False", "True"]


# ---------------------------------------------------------------- the code, for its next reader

LONG = 60  # lines: a function longer than this says why in its docstring
LONG_BECAUSE = f"Over {LONG} lines because"


def test_no_grading_function_is_long_without_saying_why():
    import ast

    long = []
    for path in [
        *sorted((ROOT / "ddp_helpers" / "grading").glob("*.py")),
        ROOT / "ddp_helpers" / "__main__.py",
    ]:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            lines = node.end_lineno - node.lineno + 1
            if lines > LONG and LONG_BECAUSE not in (ast.get_docstring(node) or ""):
                long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {lines} lines")
    assert not long, (
        f"split these, or say why in the docstring ('{LONG_BECAUSE} ...'):\n" + "\n".join(long)
    )


def test_a_stopped_notebooks_traceback_keeps_the_learners_line_above_a_deep_stack():
    from ddp_helpers.grading.kernel import error_text

    deep = [f"File /site-packages/lib.py:{n}, in f{n}()\n---> {n} f{n + 1}()" for n in range(30)]
    cell = "Cell In[3], line 14\n     13 x = 1\n---> 14 launch(spin, nprocs=2)"
    error = {
        "traceback": ["\x1b[0;31mKeyboardInterrupt\x1b[0m", cell, *deep, "KeyboardInterrupt: "]
    }
    text = error_text(error)
    assert text.startswith("Cell In[3], line 14") and "launch(spin, nprocs=2)" in text
    assert text.endswith("KeyboardInterrupt:") and "f29()" in text and "f0()" not in text
    short = {"traceback": [cell, deep[0], "KeyboardInterrupt: "]}
    assert error_text(short) == "\n".join(
        [*cell.splitlines(), *deep[0].splitlines(), "KeyboardInterrupt:"]
    )
