"""`grade --sandbox` and the limits: what a submission can reach, and what it may use.

The probes run inside a graded notebook and report what they saw in an error that lands
in the feedback; they send nothing anywhere. The memory hog and the process flood are
bounded by themselves (4 GiB, 2,000 sleepers), so that a limit that does not hold cannot
take this machine down. Nothing here skips: without bubblewrap the sandboxed batch fails
with the grader's own message saying how to install it (`.ci/run` installs it as root).
"""

from __future__ import annotations

import csv
import glob
import json
import os
import re
import stat
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import nbformat
import psutil
import pytest
from fixtures.submissions import FLOOD_SECONDS, NAMES, make_hostile_submissions

from ddp_helpers.exercises import exercises_of
from ddp_helpers.grading import sandbox
from ddp_helpers.procs import with_this_package

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "ddp_helpers"
FULL = sum(ex.points for ex in exercises_of("01"))
TIMEOUT = 20


def _grade(args, cwd: Path, **env) -> subprocess.CompletedProcess:
    (cwd / "tmpdir").mkdir(exist_ok=True)
    environ = with_this_package(dict(os.environ, TMPDIR=str(cwd / "tmpdir"), **env))
    return subprocess.run(
        [sys.executable, "-m", "ddp_helpers", "grade", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        env=environ,
    )


def _rows(path: Path) -> dict[str, dict]:
    with open(path, newline="") as f:
        return {r["submission"].split("/")[1]: r for r in csv.DictReader(f)}


def _feedback(folder: Path, name: str) -> str:
    return (folder / f"subs__{name}__{NAMES['01'].removesuffix('.ipynb')}.md").read_text()


def _left(tmp: Path) -> list[str]:
    """Processes of the run still alive: anything working under tmp, and the flood's sleepers."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.status() == psutil.STATUS_ZOMBIE or p.pid == os.getpid():
                continue
            cwd = Path(p.cwd())
            # A sandboxed batch's folder may be in /tmp (see batch._short_tmp).
            ours = cwd.is_relative_to(tmp) or any(
                part.startswith("ddp-grade-") for part in cwd.parts
            )
            if ours or p.cmdline() == ["sleep", FLOOD_SECONDS]:
                found.append(" ".join(p.cmdline()))
        except (psutil.Error, OSError):
            continue
    return found


@pytest.fixture(scope="module")
def sandboxed(tmp_path_factory):
    """The hostile submissions graded with --sandbox --memory 2G, two at a time."""
    tmp = tmp_path_factory.mktemp("sandbox")
    readable = [
        str(ROOT / "README.md"),  # the course, outside its package
        str(ROOT / "solutions" / NAMES["01"]),  # the answers
        str(tmp / "subs" / "memory_hog" / NAMES["01"]),  # another learner's submission
        str(tmp / "instructor_notes.txt"),  # the grader's own files
        "/etc/shadow",
    ]
    (tmp / "instructor_notes.txt").write_text("answers")
    writable = [str(PACKAGE), str(ROOT), str(tmp), str(Path(sys.prefix))]
    mark = f"probe-{uuid.uuid4().hex[:8]}"  # a name of this run's own
    make_hostile_submissions(tmp / "subs", readable, writable, mark)
    folders = set(glob.glob("/tmp/ddp-grade-*"))
    run = _grade(
        ["subs", "--sandbox", "--memory", "2G", "--jobs", "2", "--timeout", str(TIMEOUT)]
        + ["--out", "grades.csv", "--feedback", "feedback"],
        tmp,
    )
    assert run.returncode == 0, run.stderr
    feedback = {n: _feedback(tmp / "feedback", n) for n in ("a_probe", "b_probe")}
    seen = {}
    for name, text in feedback.items():
        found = re.search(r"RuntimeError: PROBE (\{.*\})", text)
        assert found, f"the probe of {name} did not report:\n{text}"
        seen[name] = json.loads(found.group(1))
    yield {
        "tmp": tmp,
        "run": run,
        "rows": _rows(tmp / "grades.csv"),
        "seen": seen,
        "readable": readable,
        "writable": writable,
        "mark": mark,
        "left": _left(tmp),
        "folders_left": set(glob.glob("/tmp/ddp-grade-*")) - folders,
    }
    for folder in writable:  # what a broken sandbox let through is not left in the course
        (Path(folder) / mark).unlink(missing_ok=True)


def test_the_only_network_interface_is_loopback(sandboxed):
    for seen in sandboxed["seen"].values():
        assert seen["interfaces"] == ["lo"]


def test_ranks_still_meet_on_loopback_and_answers_score(sandboxed):
    for name in ("a_probe", "b_probe"):
        row = sandboxed["rows"][name]
        assert (row["status"], row["points"]) == ("ok", str(FULL)), row


def test_nothing_outside_the_package_and_the_environment_can_be_read(sandboxed):
    for seen in sandboxed["seen"].values():
        assert seen["read"] == {path: False for path in sandboxed["readable"]}


def test_writes_land_only_in_the_submissions_own_folders(sandboxed):
    for seen in sandboxed["seen"].values():
        assert seen["home"] and seen["cwd"] and seen["tmp"], seen
        assert not seen["write"][str(PACKAGE)], seen
        assert not seen["write"][str(Path(sys.prefix))], seen
        # A course folder under /tmp (a clone in /tmp) is, inside the sandbox, a folder of
        # its private /tmp: writable there, and checked below to reach nothing real.
        if not ROOT.is_relative_to(tempfile.gettempdir()):
            assert not seen["write"][str(ROOT)], seen
    # What the sandbox let it write (a private /tmp) never reached the real folders.
    for folder in sandboxed["writable"]:
        assert not (Path(folder) / sandboxed["mark"]).exists(), folder


def test_submissions_graded_side_by_side_cannot_see_each_other(sandboxed):
    for seen in sandboxed["seen"].values():
        assert seen["marks"] == []
        assert seen["processes"] < 10  # its own PID namespace: the grader's are not there


def test_a_memory_hog_gets_an_error_row_naming_the_memory_limit(sandboxed):
    row = sandboxed["rows"]["memory_hog"]
    assert row["status"] == "error"
    assert row["1.1 gpu_for_this_rank"] == "1"  # the answer before the hog still counts
    text = _feedback(sandboxed["tmp"] / "feedback", "memory_hog")
    assert "ran into its memory limit of 2G" in text


def test_a_process_flood_gets_an_error_row_at_the_task_limit(sandboxed):
    row = sandboxed["rows"]["process_flood"]
    assert row["status"] == "error"
    text = _feedback(sandboxed["tmp"] / "feedback", "process_flood")
    assert f"more processes and threads than its limit of {sandbox.DEFAULT_TASKS}" in text


def test_nothing_is_left_running_or_on_disk(sandboxed):
    assert sandboxed["left"] == []
    assert sandboxed["folders_left"] == set()
    assert sandboxed["run"].stdout == ""  # progress and summary go to stderr


@pytest.fixture(scope="module")
def rlimited(tmp_path_factory):
    """The memory hog and the process flood without cgroups: RLIMIT_DATA and a task count.

    (Without answers: the sandboxed batch above shows the answers around a hog still count.)
    """
    tmp = tmp_path_factory.mktemp("rlimit")
    make_hostile_submissions(tmp / "subs", [], [], answers=False)
    run = _grade(
        ["subs/memory_hog", "subs/process_flood", "--memory", "2G", "--jobs", "2"]
        + ["--timeout", str(TIMEOUT), "--out", "grades.csv", "--feedback", "feedback"],
        tmp,
        DDP_HELPERS_LIMITS="rlimit",
    )
    assert run.returncode == 0, run.stderr
    return {"tmp": tmp, "rows": _rows(tmp / "grades.csv"), "left": _left(tmp)}


def test_without_cgroups_the_limits_still_hold(rlimited):
    rows, feedback = rlimited["rows"], rlimited["tmp"] / "feedback"
    assert rows["memory_hog"]["status"] == rows["process_flood"]["status"] == "error"
    assert "ran into its memory limit of 2G" in _feedback(feedback, "memory_hog")
    assert "RLIMIT_DATA" in _feedback(feedback, "memory_hog")
    assert "more processes and threads than its limit" in _feedback(feedback, "process_flood")
    assert rlimited["left"] == []


# ---------------------------------------------------------------- when it cannot be had


def _fake_bwrap(folder: Path, script: str) -> str:
    folder.mkdir()
    bwrap = folder / "bwrap"
    bwrap.write_text("#!/bin/sh\n" + script)
    bwrap.chmod(bwrap.stat().st_mode | stat.S_IXUSR)
    return f"{folder}:/usr/bin:/bin"


@pytest.mark.parametrize(
    "script, words",
    [
        (None, ["needs bubblewrap", "apt-get install bubblewrap"]),
        (
            "echo 'bwrap: No permissions to create new namespace' >&2; exit 1\n",
            ["No permissions to create new namespace", "unprivileged user namespaces"],
        ),
    ],
    ids=["not installed", "no namespaces"],
)
def test_sandbox_that_cannot_be_had_stops_before_grading(tmp_path, script, words):
    make_hostile_submissions(tmp_path / "subs", [], [])
    path = "/nonexistent" if script is None else _fake_bwrap(tmp_path / "bin", script)
    run = _grade(["subs", "--sandbox", "--out", "grades.csv"], tmp_path, PATH=path)
    assert run.returncode == 2
    message = run.stderr.strip()
    assert message.startswith("error: ") and "\n" not in message  # one paragraph
    assert "Nothing was graded" in message
    for word in words:
        assert word in message
    assert not (tmp_path / "grades.csv").exists()


def test_the_sandbox_can_be_the_default_and_turned_off(tmp_path):
    # A lesson notebook would need a kernel; it is enough to reach grading at all.
    (tmp_path / "scratch.ipynb").write_text(nbformat.writes(nbformat.v4.new_notebook()))
    args, env = ["scratch.ipynb", "--out", "g.csv"], {"DDP_HELPERS_SANDBOX": "1"}
    run = _grade(args, tmp_path, PATH="/nonexistent", **env)
    assert run.returncode == 2 and "needs bubblewrap" in run.stderr
    run = _grade([*args, "--no-sandbox"], tmp_path, PATH="/nonexistent", **env)
    assert run.returncode == 0, run.stderr
    assert "invalid" in (tmp_path / "g.csv").read_text()


@pytest.mark.parametrize(
    "args, words",
    [
        (["--memory", "lots"], "--memory takes a size such as 4G"),
        (["--memory", "1M"], "at least 256M"),
        (["--tasks", "3"], "--tasks takes a whole number"),
        (["--threads", "0"], "--threads must be 1 or more"),
    ],
)
def test_bad_limits_get_one_clear_error(tmp_path, args, words):
    run = _grade([str(tmp_path), *args], tmp_path)
    assert run.returncode == 2
    assert words in run.stderr


def test_sizes_read_and_written():
    assert sandbox.parse_size("4G") == 4 << 30
    assert sandbox.parse_size("512MiB") == 512 << 20
    assert sandbox.parse_size("2000000000") == 2_000_000_000
    assert sandbox.format_size(2 << 30) == "2G"
    assert sandbox.format_size(1536 << 20) == "1536M"
