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
import re
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from fixtures.submissions import INJECTED_NAMES, IPC_KEY, SHM_NAME, make_hostile_corpus
from grading_common import left_running, tmpdir_of
from markdown_it import MarkdownIt

from ddp_helpers.grading.outputs.escape import printable
from ddp_helpers.procs import with_this_package

SECRET = "PRIVATE KEY 7d1e"  # in a file of the instructor's that no output may quote
TARGET = "the instructor's own file\n"  # a file nothing may be appended to
OUTPUTS = ["--out", "grades.csv", "--feedback", "fb", "--gradescope", "gs"]
OUTPUTS += ["--report", "report.html"]
LIMITS = ["--disk", "64M", "--jobs", "2", "--timeout", "30"]
MEMORY_BOUND = 100 << 20  # bytes: the grader and each worker stay below (76-88 MB here)
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


def _ipc_left() -> list[str]:
    """What IPC_LEFT leaves where a notebook can leave it: its SysV segment, its /dev/shm file."""
    left = []
    with open("/proc/sysvipc/shm") as f:
        if any(line.split()[0] == str(IPC_KEY) for line in f.readlines()[1:]):
            left.append(f"SysV segment {IPC_KEY:#x}")
    if os.path.exists(f"/dev/shm/{SHM_NAME}"):
        left.append(f"/dev/shm/{SHM_NAME}")
    return left


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """The corpus graded in the sandbox, with the limits, every output asked for."""
    assert _ipc_left() == [], "left by an earlier run: remove it (ipcrm -M, rm) first"
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
        "ipc_left": _ipc_left(),
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
    # Three strings: not a number a rank could hold, whatever they say they equal.
    assert row["1.3 predict_all_reduce mistake"] == "reduce_shape"


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
    assert _ipc_left() == [], "left by an earlier run: remove it (ipcrm -M, rm) first"
    names = ("log_links", "log_specials", "scorer_forger", "ipc_left")
    run, _ = _graded_watched([*(f"corpus/{n}" for n in names), "--no-sandbox", *OUTPUTS], tmp)
    assert run.returncode == 0, run.stderr
    return {
        "rows": _rows(tmp),
        "written": _everything_written(tmp),
        "feedback": {p.name.split("__")[1]: p.read_text() for p in (tmp / "fb").iterdir()},
        "target": target.read_text(),
        "left": left_running(tmp),
        "ipc_left": _ipc_left(),
    }


def test_without_the_sandbox_the_grader_still_follows_no_link_it_was_left(unboxed):
    assert unboxed["target"] == TARGET  # the scorer's output was not appended to it
    for name, text in unboxed["written"].items():
        assert SECRET not in text, name  # the dying kernel's log was not read through it
    rows = unboxed["rows"]
    assert (rows["log_links"]["status"], rows["log_links"]["points"]) == ("error", "4")
    assert rows["log_specials"]["status"] == "error"  # a FIFO and /dev/zero: no hang
    assert unboxed["left"] == []


# ---------------------------------------------------------------- issue 48: out of reach


def _reported(feedback: str, mark: str) -> str:
    """What an answer raised as `mark` + text, as the feedback shows its exception."""
    found = re.findall(re.escape(mark) + r" ([^\n`]*)", feedback)
    assert found, feedback
    return found[-1]


def test_a_rank_sees_signals_and_opens_nothing_of_the_grader(corpus):
    row = corpus["rows"]["scorer_survey"]
    assert (row["1.2 shard mistake"], row["points"]) == ("error", "0")
    reached = json.loads(_reported(corpus["feedback"]["scorer_survey"], "REACHED"))
    # It looked, and found its own: the helper that forks the check's ranks.
    assert any("launcher.zygote" in cmd for cmd in reached["seen"]), reached
    for what in ("seen", "opened", "signalled"):
        graders = [c for c in reached[what] if "grading" in c or " grade " in c]
        assert graders == [], (what, reached[what])


def test_forged_lines_and_a_killed_grader_score_nothing(corpus):
    row = corpus["rows"]["scorer_forger"]
    assert row["points"] == "0", row
    assert row["1.3 predict_all_reduce mistake"] != "", row  # its own ranks broken: never right
    for column in ("1.1 gpu_for_this_rank", "1.2 shard", "1.4 predict_all_gather"):
        assert row[f"{column} mistake"] == "missing", row


def test_without_the_sandbox_a_line_that_is_not_the_scorers_is_refused(unboxed):
    row = unboxed["rows"]["scorer_forger"]  # it reached its scorer, as root can
    assert row["points"] == "0", row
    assert row["1.3 predict_all_reduce mistake"] != "", row  # refused, or its ranks broken
    assert unboxed["left"] == []


def test_a_message_of_another_shape_from_the_kernel_is_the_submissions_error(corpus):
    assert corpus["rows"]["malformed_message"]["status"] == "error"
    assert "that the Jupyter protocol does not allow" in corpus["feedback"]["malformed_message"]


def test_a_cell_too_large_to_run_is_named_as_such(corpus):
    assert corpus["rows"]["big_cell"]["status"] == "error"
    feedback = corpus["feedback"]["big_cell"]
    assert "is 20.0M long, over the 16M the grader runs in one cell" in feedback
    assert "Print less" not in feedback


@pytest.mark.parametrize("name", ["disk_deep", "disk_fast", "disk_filler"])
def test_the_disk_limit_holds_past_path_max_and_at_any_speed(corpus, name):
    """How much each wrote before the kernel refused: tests/grading/test_disk.py (here the
    grader stops the notebook as soon as its disk is full, before it could say)."""
    row, feedback = corpus["rows"][name], corpus["feedback"][name]
    assert row["status"] == "error"
    assert "its disk limit of 64M" in feedback


@pytest.mark.parametrize("mode", ["corpus", "unboxed"])
def test_ipc_objects_and_shared_memory_files_end_with_the_submission(mode, request):
    graded = request.getfixturevalue(mode)
    assert graded["rows"]["ipc_left"]["status"] == "ok"  # it ran, and made both
    assert graded["ipc_left"] == []
