"""Stopping a batch end to end: Ctrl-C, SIGTERM, a worker killed from outside."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time

import psutil
from fixtures.submissions import NAMES, make_submissions
from grading_common import _env

from ddp_helpers import entry_points
from support import SOON, processes_under

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


def _wait_for_ranks(worker_pid: int, ranks: int = 2, seconds: float = 60) -> bool:
    """Whether the worker's kernel has forked `ranks` ranks (its zygote and as many forks).

    The event a stop must come after to test what it ends: a fixed sleep guesses it."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            under = psutil.Process(worker_pid).children(recursive=True)
            zygotes = [p for p in under if entry_points.ZYGOTE in " ".join(p.cmdline())]
        except psutil.Error:
            zygotes = []
        if len(zygotes) >= ranks + 1:
            return True
        time.sleep(0.1)
    return False


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
    worker_pid = _wait_for_kernel_of(proc, "endless_loop")
    assert worker_pid is not None and _wait_for_ranks(worker_pid), "the ranks did not start"
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
    from ddp_helpers.grading.confinement.sandbox import ConfinementRequest, choose

    dirs = choose(ConfinementRequest(sandbox=False)).limits.folders("x")
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
    assert _wait_for_ranks(worker_pid), "the endless loop's two ranks did not start"
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
