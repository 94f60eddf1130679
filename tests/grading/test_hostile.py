"""The grader against hostile submissions (issue 36): the project's own corpus, graded as an
instructor would grade it, and checked as an instructor would check the result.

The corpus (tests/fixtures/submissions.py, make_hostile_corpus) tries each way out there
was: links in place of the grader's logs, links among the submissions, the course's
reference passed off as the learner's, answers that equal everything or forge the scorer's
lines, JSON nested past the recursion limit, a disk filler, an output flood, a huge
exception, and text meant for whatever renders the feedback, the CSV or the terminal. It
is graded once in the sandbox (the default where it runs; it fails with the grader's own
note where bubblewrap is missing) with the grader's memory sampled all along, and the
log-link submissions once more without it, where the links can be made at all. What the
sandbox already stopped (probes, a memory hog, a process flood, a leak) is in
test_sandbox.py; the scorer's own lines, forged, in test_scorer.py.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from fixtures.submissions import INJECTED_NAMES, make_hostile_corpus
from grading_common import left_running, tmpdir_of
from markdown_it import MarkdownIt

from ddp_helpers.grading.outputs.escape import printable
from ddp_helpers.procs import with_this_package

SECRET = "PRIVATE KEY 7d1e"  # in a file of the instructor's that no output may quote
TARGET = "the instructor's own file\n"  # a file nothing may be appended to
OUTPUTS = ["--out", "grades.csv", "--feedback", "fb", "--gradescope", "gs"]
OUTPUTS += ["--report", "report.html"]
LIMITS = ["--disk", "64M", "--jobs", "2", "--timeout", "30"]
MEMORY_BOUND = 100 << 20  # bytes: the grader and each worker stay below (~45 MB here)
WITHOUT = "note: Grading without the sandbox"


def _outside(tmp: Path) -> tuple[Path, Path]:
    (tmp / "outside").mkdir()
    secret, target = tmp / "outside" / "id_ed25519", tmp / "outside" / "notes.txt"
    secret.write_text(SECRET + "\n")
    target.write_text(TARGET)
    return secret, target


def _graded_watched(args: list[str], cwd: Path) -> tuple[subprocess.CompletedProcess, dict]:
    """`grade` run in cwd, the peak memory (RSS) of the grader and of its workers sampled
    every 50 ms while it runs."""
    tmpdir = tmpdir_of(cwd)
    tmpdir.mkdir(exist_ok=True)
    env = with_this_package(dict(os.environ, TMPDIR=str(tmpdir)))
    proc = subprocess.Popen(
        [sys.executable, "-m", "ddp_helpers", "grade", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    peak = {"grader": 0, "worker": 0}
    deadline = time.monotonic() + 600
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            grader = psutil.Process(proc.pid)
            peak["grader"] = max(peak["grader"], grader.memory_info().rss)
            for child in grader.children(recursive=True):
                if "ddp_helpers.grading.worker.process" in " ".join(child.cmdline()):
                    peak["worker"] = max(peak["worker"], child.memory_info().rss)
        except psutil.Error:
            pass
        time.sleep(0.05)
    out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), peak


def _rows(tmp: Path) -> dict[str, dict]:
    with open(tmp / "grades.csv", newline="") as f:
        return {r["submission"].split("/")[1]: r for r in csv.DictReader(f)}


def _feedback(tmp: Path) -> dict[str, str]:
    """Each feedback file's text, by the submission's folder."""
    return {path.name.split("__")[1]: path.read_text() for path in (tmp / "fb").iterdir()} | {
        "eve": (tmp / "fb" / "corpus__eve.md").read_text()
    }


def _everything_written(tmp: Path) -> dict[str, str]:
    files = [tmp / "grades.csv", tmp / "report.html", *(tmp / "fb").iterdir()]
    files += (tmp / "gs").rglob("results.json")
    return {str(path.relative_to(tmp)): path.read_text() for path in files}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """The corpus graded in the sandbox, with the limits, every output asked for."""
    tmp = tmp_path_factory.mktemp("hostile")
    secret, target = _outside(tmp)
    kinds = make_hostile_corpus(tmp / "corpus", secret, target)
    run, peak = _graded_watched(["corpus", *LIMITS, *OUTPUTS], tmp)
    assert run.returncode == 0, run.stderr
    assert WITHOUT not in run.stderr, run.stderr  # the sandbox ran (bubblewrap is there)
    return {
        "tmp": tmp,
        "run": run,
        "peak": peak,
        "kinds": kinds,
        "rows": _rows(tmp),
        "feedback": _feedback(tmp),
        "written": _everything_written(tmp),
        "target": target.read_text(),
        "left": left_running(tmp),
    }


def test_every_submission_has_its_row_and_the_batch_its_outputs(corpus):
    folders = {printable(name.split("/")[1]) for name in corpus["kinds"]}  # as the CSV shows
    assert set(corpus["rows"]) == folders
    assert len(list((corpus["tmp"] / "fb").iterdir())) == len(folders)
    assert "class report" in corpus["run"].stderr.splitlines()[-1]


def test_links_among_the_submissions_take_nobodys_work(corpus):
    rows, feedback = corpus["rows"], corpus["feedback"]
    assert (rows["alice"]["status"], rows["alice"]["points"]) == ("ok", "4")
    for name in ("mallory", "cheat", "eve"):  # a link to alice's, to the solutions, a folder
        assert (rows[name]["status"], rows[name]["points"]) == ("invalid", "0"), name
        assert "symbolic link" in feedback[name] and "follows no link" in feedback[name]


def test_the_course_reference_however_passed_off_scores_nothing(corpus):
    row = corpus["rows"]["from_course"]
    assert row["points"] == "0"
    mistakes = [row[f"{c} mistake"] for c in ("1.2 shard", "1.3 predict_all_reduce")]
    assert mistakes + [row["1.4 predict_all_gather mistake"]] == ["from_course"] * 3
    # 1.1 set LOCAL_RANK to RANK before returning it: the check read it first.
    assert row["1.1 gpu_for_this_rank mistake"] == "gpu_global"


def test_answers_that_equal_everything_or_forge_lines_score_nothing_by_it(corpus):
    row = corpus["rows"]["equal_and_forged"]
    assert row["points"] == "0", row
    assert row["1.1 gpu_for_this_rank mistake"] == "gpu_node"  # judged by its value, cuda:0
    assert row["1.2 shard mistake"] == "error"  # its forged "correct" line reached nobody
    assert row["1.3 predict_all_reduce mistake"] == "error"


def test_json_nested_past_the_recursion_limit_is_an_invalid_row(corpus):
    assert corpus["rows"]["nested"]["status"] == "invalid"
    assert "nested deeper than any notebook" in corpus["feedback"]["nested"]


def test_a_disk_filler_is_stopped_at_the_disk_limit(corpus):
    assert corpus["rows"]["disk_filler"]["status"] == "error"
    assert "its disk limit of 64M" in corpus["feedback"]["disk_filler"]


def test_an_output_flood_is_stopped_and_never_held_in_memory(corpus):
    assert corpus["rows"]["output_flood"]["status"] == "error"
    assert "of more than 16M, which the grader does not take" in corpus["feedback"]["output_flood"]
    peak = corpus["peak"]
    assert 0 < peak["grader"] < MEMORY_BOUND and 0 < peak["worker"] < MEMORY_BOUND, peak


def test_a_huge_exception_is_cut_in_every_output(corpus):
    for name, text in corpus["written"].items():
        assert "y" * 3000 not in text, name  # 4 MiB raised, 2,000 characters kept
    assert "raised RuntimeError: yyyy" in corpus["feedback"]["huge_error"]


def test_what_reaches_other_programs_is_inert_there(corpus):
    feedback = corpus["feedback"]["injection"]
    html = MarkdownIt("commonmark").render(feedback)
    assert "<script" not in html and "<img" not in html and "<b>" not in html
    assert 'href="javascript' not in html
    assert "&lt;script&gt;alert(1)" in html  # shown, as text
    for path in (corpus["tmp"] / "gs").rglob("results.json"):
        results = json.loads(path.read_text())
        assert results["output_format"] == results["test_output_format"] == "text"
    with open(corpus["tmp"] / "grades.csv", newline="") as f:
        students = [r["student"] for r in csv.DictReader(f)]
    assert "'" + INJECTED_NAMES[0] in students  # no formula for a spreadsheet
    for name, text in [*corpus["written"].items(), ("stderr", corpus["run"].stderr)]:
        assert "\x1b" not in text and "\x07" not in text, name


def test_nothing_outside_was_read_written_or_left(corpus):
    assert corpus["target"] == TARGET
    for name, text in corpus["written"].items():
        assert SECRET not in text, name
    assert corpus["left"] == []
    assert sorted(p.name for p in tmpdir_of(corpus["tmp"]).iterdir()) == []


@pytest.fixture(scope="module")
def unboxed(tmp_path_factory):
    """The log-link submissions graded without the sandbox, where the notebook runs as the
    grader's user and can put its links where the grader's logs are."""
    tmp = tmp_path_factory.mktemp("unboxed")
    secret, target = _outside(tmp)
    make_hostile_corpus(tmp / "corpus", secret, target)
    subs = [f"corpus/{name}" for name in ("log_links", "log_specials")]
    run, _ = _graded_watched([*subs, "--no-sandbox", *OUTPUTS], tmp)
    assert run.returncode == 0, run.stderr
    return {
        "rows": _rows(tmp),
        "written": _everything_written(tmp),
        "target": target.read_text(),
        "left": left_running(tmp),
    }


def test_without_the_sandbox_the_grader_still_follows_no_link_it_was_left(unboxed):
    assert unboxed["target"] == TARGET  # the scorer's output was not appended to it
    for name, text in unboxed["written"].items():
        assert SECRET not in text, name  # the dying kernel's log was not read through it
    rows = unboxed["rows"]
    assert (rows["log_links"]["status"], rows["log_links"]["points"]) == ("error", "4")
    assert rows["log_specials"]["status"] == "error"  # a FIFO and /dev/zero: no hang
    assert unboxed["left"] == []
