"""`python -m ddp_helpers grade` end to end, as instructors see it: one batch of short sample
submissions, real kernels and all, covering every status; the LMS and Gradescope files and
the class report it writes."""

from __future__ import annotations

import csv
import json
import shutil
import tempfile
from pathlib import Path

import jsonschema
import psutil
import pytest
from fixtures.submissions import ESCAPEE_SECONDS, NAMES, make_submissions
from grading_common import TIMEOUT, _grade_cli

from ddp_helpers.exercises import exercises_of, lesson01
from ddp_helpers.grading import ExerciseScore, words
from support import ROOT, extra_case_lines, processes_under

# ---------------------------------------------------------------- one batch, end to end


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    """Every sample submission but the endless loop graded in one batch, two at a time,
    in the sandbox (tests/grading/test_sandbox.py tests what it keeps out).

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
    assert row["3.2 average_gradients"] == "" and row["1.2 shard"] == "1"
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
    assert row["2.3 cleanup"] == "0"


def test_feedback_of_a_timeout_shows_where_it_was_stuck(endless):
    text = endless["feedback"]
    assert f"stopped after {ENDLESS_LIMIT} s" in text
    assert "launch(spin, nprocs=2)" in text and "KeyboardInterrupt" in text
    assert "`cleanup` is not defined" in text


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
    assert lesson01.all_reduce.MESSAGES["reduce_local"].format(got=[1, 2, 3]) in text
    assert f"💡 Hint: {lesson01.q3.hints['reduce_sum']}" in text
    assert "not attempted yet" in text  # 1.4 was left as the build's stub


def test_a_japanese_submission_gets_its_feedback_and_gradescope_output_in_japanese(batch):
    from ddp_helpers import i18n
    from ddp_helpers.grading.words import FEEDBACK

    name = f"japanese/{NAMES['01']}"
    assert _mistakes_of(batch, name)["1.4"] == "gather_shape"
    text = _feedback(batch, name)
    tests = {t["name"]: t for t in _gradescope(batch, name)["tests"]}
    with i18n.using("ja"):
        said = lesson01.all_gather.MESSAGES["gather_shape"]
        hint = FEEDBACK["hint"].format(hint=lesson01.q4.hints["gather_all"])
        title = FEEDBACK["title"].format(name=f"subs/{name}")
    assert said in text and hint in text and title in text
    assert said in tests["1.4 predict_all_gather"]["output"]
    assert lesson01.all_gather.MESSAGES["gather_shape"] not in text  # the English one
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
    assert text.count("runs the course's own reference answer") == len(lesson01.EXERCISES)
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

SCHEMA = json.loads((ROOT / "tests" / "fixtures" / "gradescope_results.schema.json").read_text())


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


@pytest.mark.browser
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
    from ddp_helpers.exercises.kit import RANK_MISTAKES
    from ddp_helpers.grading.outputs import class_report

    core = ["not_attempted", "not_attempted_other", "not_attempted_pasted", "error", "missing"]
    grader = [k.removesuffix(".title") for k in words.GRADER if k.endswith(".title")]
    raised = {"exception": "ValueError"}  # what an error's title names
    for lesson in LESSONS:
        for ex in exercises_of(lesson):
            for key in [*ex.mistakes, *RANK_MISTAKES, *core, *grader]:
                score = ExerciseScore(ex.id, ex.name, 1, "wrong", mistake=key, fields=raised)
                title = class_report.title_of(lesson, score)
                assert title and len(title) <= 60 and "{" not in title, (ex.id, key, title)
