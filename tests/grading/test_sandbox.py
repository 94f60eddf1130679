"""`grade`'s sandbox (the default where it can run), its clean environment and its limits:
what a submission can reach, what it is given, and what it may use.

The probes run inside a graded notebook and report what they saw in an error that lands
in the feedback; they send nothing anywhere. The memory hog and the process flood are
bounded by themselves (4 GiB, 2,000 sleepers), so that a limit that does not hold cannot
take this machine down. The leaking submission (issue 21) raises with INSTRUCTOR_TOKEN,
which the grader holds: no output may show it, with or without the sandbox, unless
--pass-env gives it. Nothing here skips: without bubblewrap the sandboxed batch fails with
the grader's own note saying how to install it (`.ci/run` installs it as root).
"""

from __future__ import annotations

import contextlib
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
import pytest
from fixtures.submissions import (
    NAMES,
    make_hostile_submissions,
    make_leaking_submission,
)
from grading_common import grade_in, left_running, outputs_of

from ddp_helpers.exercises import exercises_of
from ddp_helpers.grading.confinement import limits, sandbox
from support import ROOT

PACKAGE = ROOT / "ddp_helpers"
FULL = sum(ex.points for ex in exercises_of("01"))
TIMEOUT = 20
TOKEN = "s3cr3t-123"  # the instructor's, in the grader's environment only
GIVEN = ("DDP_HELPERS_TEST_GIVEN", "given-789")  # a variable of the course's: passed
SECRETS = {"INSTRUCTOR_TOKEN": TOKEN, GIVEN[0]: GIVEN[1]}
OUTPUTS = ["--out", "grades.csv", "--feedback", "feedback", "--gradescope", "gs"]
OUTPUTS += ["--report", "report.html"]
WITHOUT = "note: Grading without the sandbox"


def _rows(path: Path) -> dict[str, dict]:
    with open(path, newline="") as f:
        return {r["submission"].split("/")[1]: r for r in csv.DictReader(f)}


def _feedback(folder: Path, name: str) -> str:
    return (folder / f"subs__{name}__{NAMES['01'].removesuffix('.ipynb')}.md").read_text()


def _leak_outputs(tmp: Path) -> dict[str, str]:
    """The leaking submission's feedback and results.json."""
    stem = f"subs__leak__{NAMES['01'].removesuffix('.ipynb')}"
    results = tmp / "gs" / "results.json"  # where it goes when graded alone
    return {
        "feedback": (tmp / "feedback" / f"{stem}.md").read_text(),
        "results.json": (
            results if results.exists() else tmp / "gs" / stem / results.name
        ).read_text(),
    }


@contextlib.contextmanager
def _marks_removed(writable: list[str], mark: str):
    """What a broken sandbox let a probe write is not left in the course, whatever happens."""
    try:
        yield
    finally:
        for folder in writable:
            (Path(folder) / mark).unlink(missing_ok=True)


@pytest.fixture(scope="module")
def sandboxed(tmp_path_factory):
    """The hostile submissions and the leaking one graded in the sandbox, which is the default
    where it can run (no --sandbox given), with --memory 2G, two at a time."""
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
    make_leaking_submission(tmp / "subs", GIVEN[0])
    with _marks_removed(writable, mark):  # also when the run itself fails
        folders = set(glob.glob("/tmp/ddp-grade-*"))
        run = grade_in(
            ["subs", "--memory", "2G", "--jobs", "2", "--timeout", str(TIMEOUT), *OUTPUTS],
            tmp,
            **SECRETS,
        )
        assert run.returncode == 0, run.stderr
        assert WITHOUT not in run.stderr, run.stderr  # it says why, and how to install it
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
            "left": left_running(tmp),
            "folders_left": (set(glob.glob("/tmp/ddp-grade-*")) - folders) | set(run.tmp_left),
            "outputs": outputs_of(tmp),
            "leak": _leak_outputs(tmp),
        }


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


def test_the_default_sandbox_keeps_the_graders_variables_out_of_every_output(sandboxed):
    for name, text in sandboxed["outputs"].items():
        assert TOKEN not in text, name
    assert TOKEN not in sandboxed["run"].stderr
    feedback, results = sandboxed["leak"]["feedback"], sandboxed["leak"]["results.json"]
    # The variable it was not given is not there; one of the course's is, in the sandbox.
    assert "TypeError" in feedback and "NoneType" in feedback
    assert f"given {GIVEN[1]}, sees the course: False" in feedback
    for text in (feedback, results, sandboxed["outputs"]["report.html"]):
        assert f"leak in a rank None, given {GIVEN[1]}" in text


def test_nothing_is_left_running_or_on_disk(sandboxed):
    assert sandboxed["left"] == []
    assert sandboxed["folders_left"] == set()
    assert sandboxed["run"].stdout == ""  # progress and summary go to stderr


BLOCKED_BWRAP = "echo 'bwrap: No permissions to create new namespace' >&2; exit 1\n"


@pytest.fixture(scope="module")
def rlimited(tmp_path_factory):
    """Where the sandbox cannot run (a bwrap that fails as it does in most containers comes
    first on PATH) and without cgroups: the default grades without the sandbox, and says so;
    the leaking submission, the memory hog and the process flood meet the clean environment,
    RLIMIT_DATA and a task count.

    (Without answers: the sandboxed batch above shows the answers around a hog still count.)
    """
    tmp = tmp_path_factory.mktemp("rlimit")
    make_hostile_submissions(tmp / "subs", [], [], answers=False)
    make_leaking_submission(tmp / "subs", GIVEN[0])
    path = _fake_bwrap(tmp / "bin", BLOCKED_BWRAP) + os.pathsep + os.environ["PATH"]
    run = grade_in(
        ["subs/memory_hog", "subs/process_flood", "subs/leak", "--memory", "2G", "--jobs", "2"]
        + ["--timeout", str(TIMEOUT), "--limits", "rlimit", *OUTPUTS],
        tmp,
        PATH=path,
        **SECRETS,
    )
    assert run.returncode == 0, run.stderr
    return {
        "tmp": tmp,
        "run": run,
        "rows": _rows(tmp / "grades.csv"),
        "left": left_running(tmp),
        "outputs": outputs_of(tmp),
        "leak": _leak_outputs(tmp),
    }


def test_where_the_sandbox_cannot_run_the_first_line_says_so_and_grading_goes_on(rlimited):
    run = rlimited["run"]
    first = run.stderr.splitlines()[0]
    assert first.startswith(WITHOUT), run.stderr
    for words in ("No permissions to create new namespace", "unprivileged user namespaces"):
        assert words in first  # why, and how to get it
    assert "--no-sandbox" in first and "clean environment and the limits" in first
    assert rlimited["rows"]["leak"]["status"] == "ok"


def test_without_the_sandbox_the_graders_variables_stay_out_of_every_output(rlimited):
    for name, text in rlimited["outputs"].items():
        assert TOKEN not in text, name
    assert TOKEN not in rlimited["run"].stderr
    feedback, results = rlimited["leak"]["feedback"], rlimited["leak"]["results.json"]
    assert "TypeError" in feedback and "NoneType" in feedback
    assert f"given {GIVEN[1]}, sees the course: True" in feedback  # no sandbox indeed
    for text in (feedback, results, rlimited["outputs"]["report.html"]):
        assert f"leak in a rank None, given {GIVEN[1]}" in text


def test_without_cgroups_the_limits_still_hold(rlimited):
    rows, feedback = rlimited["rows"], rlimited["tmp"] / "feedback"
    assert rows["memory_hog"]["status"] == rows["process_flood"]["status"] == "error"
    assert "ran into its memory limit of 2G" in _feedback(feedback, "memory_hog")
    assert "RLIMIT_DATA" in _feedback(feedback, "memory_hog")
    assert "more processes and threads than its limit" in _feedback(feedback, "process_flood")
    assert rlimited["left"] == []


@pytest.fixture(scope="module")
def passed(tmp_path_factory):
    """The leaking submission graded with --no-sandbox --pass-env INSTRUCTOR_TOKEN."""
    tmp = tmp_path_factory.mktemp("passed")
    make_leaking_submission(tmp / "subs", GIVEN[0])
    run = grade_in(
        ["subs", "--no-sandbox", "--pass-env", "INSTRUCTOR_TOKEN", *OUTPUTS], tmp, **SECRETS
    )
    assert run.returncode == 0, run.stderr
    return {
        "run": run,
        "leak": _leak_outputs(tmp),
        "outputs": outputs_of(tmp),
        "left": left_running(tmp),
    }


def test_a_variable_named_with_pass_env_reaches_the_notebook(passed):
    # What the two tests above look for does appear, once the notebook is given it.
    feedback, results = passed["leak"]["feedback"], passed["leak"]["results.json"]
    assert f"leak {TOKEN}" in feedback and "sees the course: True" in feedback
    assert f"leak in a rank {TOKEN}, given" in results
    assert f"leak in a rank {TOKEN}, given" in passed["outputs"]["report.html"]
    assert WITHOUT not in passed["run"].stderr  # --no-sandbox: no note
    assert passed["left"] == []


def _fake_bwrap(folder: Path, script: str) -> str:
    folder.mkdir()
    bwrap = folder / "bwrap"
    bwrap.write_text("#!/bin/sh\n" + script)
    bwrap.chmod(bwrap.stat().st_mode | stat.S_IXUSR)
    return f"{folder}:/usr/bin:/bin"


def test_the_environment_holds_the_allow_list_the_passed_names_and_its_own_folders():
    environ = {
        "PATH": "/usr/bin",
        "LANG": "ja_JP.UTF-8",
        "LC_ALL": "C.UTF-8",
        "DDP_HELPERS_LANG": "ja",
        "DDP_HELPERS_GRADER_PID": "1",
        "DDP_HELPERS_OUTPUT": "ordered",
        "CUDA_VISIBLE_DEVICES": "1",
        "HOME": "/home/instructor",
        "TMPDIR": "/scratch",
        "OMP_NUM_THREADS": "8",
        "INSTRUCTOR_TOKEN": TOKEN,
        "AWS_SECRET_ACCESS_KEY": "abc",
        "HF_HOME": "/data/hf",
        "VIRTUAL_ENV": "/venv",
    }
    conf = sandbox.Confinement(threads=2, pass_env=("HF_HOME",))
    env = sandbox.submission_environment(environ, conf, "/w/home", "/w/tmp")
    env.pop("PYTHONUSERBASE", None)  # only where the grader's Python has a user site
    assert env == {
        "PATH": "/usr/bin",
        "LANG": "ja_JP.UTF-8",
        "LC_ALL": "C.UTF-8",
        "DDP_HELPERS_LANG": "ja",
        "CUDA_VISIBLE_DEVICES": "1",
        "HF_HOME": "/data/hf",
        "HOME": "/w/home",
        "TMPDIR": "/w/tmp",
        "OMP_NUM_THREADS": "2",
        "MKL_NUM_THREADS": "2",
        "OPENBLAS_NUM_THREADS": "2",
        "DDP_HELPERS_WARM_UP": "0",
        "PYTHONPATH": str(ROOT),
    }
    assert sandbox.Confinement.from_json(conf.to_json()) == conf  # as the worker gets it


# ---------------------------------------------------------------- when it cannot be had


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
    run = grade_in(["subs", "--sandbox", "--out", "grades.csv"], tmp_path, PATH=path)
    assert run.returncode == 2
    message = run.stderr.strip()
    assert message.startswith("error: ") and "\n" not in message  # one paragraph
    assert "Nothing was graded" in message
    for word in words:
        assert word in message
    assert not (tmp_path / "grades.csv").exists()


@pytest.mark.parametrize(
    "args, env, note",
    [
        ([], {}, True),  # the default: without it, and says why and how to get it
        (["--no-sandbox"], {}, False),
        ([], {"DDP_HELPERS_SANDBOX": "0"}, False),
        (["--no-sandbox"], {"DDP_HELPERS_SANDBOX": "1"}, False),
    ],
    ids=["default", "--no-sandbox", "DDP_HELPERS_SANDBOX=0", "=1 then --no-sandbox"],
)
def test_without_bubblewrap_the_default_grades_and_says_so_first(tmp_path, args, env, note):
    # A lesson notebook would need a kernel; it is enough to reach grading at all.
    (tmp_path / "scratch.ipynb").write_text(nbformat.writes(nbformat.v4.new_notebook()))
    run = grade_in(["scratch.ipynb", "--out", "g.csv", *args], tmp_path, PATH="/nonexistent", **env)
    assert run.returncode == 0, run.stderr
    assert "invalid" in (tmp_path / "g.csv").read_text()
    first = run.stderr.splitlines()[0]
    assert first.startswith(WITHOUT) is note, run.stderr
    if note:
        assert "bubblewrap (`bwrap`) is not installed" in first
        assert "apt-get install bubblewrap" in first and "--no-sandbox" in first


def test_the_sandbox_asked_for_by_the_environment_still_refuses_without_it(tmp_path):
    (tmp_path / "scratch.ipynb").write_text(nbformat.writes(nbformat.v4.new_notebook()))
    env = {"DDP_HELPERS_SANDBOX": "1", "PATH": "/nonexistent"}
    run = grade_in(["scratch.ipynb", "--out", "g.csv"], tmp_path, **env)
    assert run.returncode == 2 and "needs bubblewrap" in run.stderr
    assert not (tmp_path / "g.csv").exists()


@pytest.mark.parametrize(
    "args, words",
    [
        (["--memory", "lots"], "--memory takes a size such as 4G"),
        (["--memory", "1M"], "at least 256M"),
        (["--tasks", "3"], "--tasks takes a whole number"),
        (["--threads", "0"], "--threads must be 1 or more"),
        (["--pass-env", "NOT_SET_HERE_21"], "NOT_SET_HERE_21 is not set here"),
        (["--pass-env", "HOME"], "gives every submission a HOME of its own"),
        (["--pass-env", "A=B"], "--pass-env takes the name of an environment variable"),
    ],
)
def test_bad_limits_or_variables_get_one_clear_error(tmp_path, args, words):
    run = grade_in([str(tmp_path), *args], tmp_path)
    assert run.returncode == 2
    assert words in run.stderr


def test_sizes_read_and_written():
    assert sandbox.parse_size("4G") == 4 << 30
    assert sandbox.parse_size("512MiB") == 512 << 20
    assert sandbox.parse_size("2000000000") == 2_000_000_000
    assert sandbox.format_size(2 << 30) == "2G"
    assert sandbox.format_size(1536 << 20) == "1536M"


@pytest.mark.parametrize("language", ["en", "ja"])
def test_how_a_limit_was_seen_is_said_in_the_feedbacks_language(tmp_path, language):
    """Each mechanism's "how" fills {how} of a translated message: no English inside the
    Japanese (issue 40), from counters as the kernel writes them."""
    from ja_guard import english_in_japanese

    from ddp_helpers import i18n
    from ddp_helpers.grading.confinement.limits import Cgroup1, Cgroup2, Rlimit

    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    (v2 / "pids.events").write_text("max 0\n")
    v1 = {"memory": tmp_path / "mem", "pids": tmp_path / "pids"}
    for folder in v1.values():
        folder.mkdir()
    (v1["memory"] / "memory.oom_control").write_text("oom_kill 0\n")
    (v1["memory"] / "memory.failcnt").write_text("0\n")
    (v1["pids"] / "pids.events").write_text("max 2\n")
    with i18n.using(language):
        seen = [
            Cgroup2.hit({"memory": v2, "pids": v2}, 1 << 30, 0),
            Cgroup1.hit(v1, 1 << 30, 0),
            Rlimit.hit({}, 1 << 30, 1),
        ]
        said = [  # the tasks' limit is a number (Confinement.tasks), grouped in Japanese
            sandbox.MESSAGES[f"{which}_hit"].format(
                limit="1 GiB" if which == "memory" else 10_000, how=how
            )
            for which, how in seen
        ]
    assert [which for which, _ in seen] == ["memory", "tasks", "memory"]
    assert Rlimit.hit({}, 1 << 30, 0) is None
    if language == "en":
        assert "out-of-memory killer" in said[0] and "RLIMIT_DATA" in said[2]
    else:
        assert "OOM killer" in said[0] and "fork" in said[1] and "RLIMIT_DATA" in said[2]
        for text in said:
            assert english_in_japanese(text) == [], text


CGROUP_MECHANISMS = [m for m in ("cgroup2", "cgroup1") if limits.MECHANISMS[m].usable()]


@pytest.fixture
def cgroup2_hierarchy(tmp_path):
    """A cgroup v2 hierarchy of this test's own, where the grader's cgroup is v1 (as on
    this project's CI): mounted in tmp_path (root), unmounted after. Its core files
    (cgroup.procs, cgroup.kill, cgroup.events) are what emptying a v2 cgroup uses."""
    if limits.Cgroup2.usable():
        yield None  # the grader's own v2 cgroup is there
        return
    mount = tmp_path / "cgroup2"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "cgroup2", "none", str(mount)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"no cgroup v2 hierarchy can be had here: {made.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


@pytest.mark.parametrize("mechanism", [*CGROUP_MECHANISMS, "cgroup2 (own hierarchy)"])
def test_emptying_a_submissions_cgroups_kills_a_forking_tree_and_removes_them(mechanism, request):
    """What a killed worker leaves: processes that fork on, in the submission's cgroups.
    The mechanism kills them all (cgroup.kill and `populated 0` on v2; the listed pids
    until rmdir succeeds on v1) and removes the cgroups. 8 processes at most."""
    name = sandbox.cgroup_name()
    if mechanism == "cgroup2 (own hierarchy)":
        mount = request.getfixturevalue("cgroup2_hierarchy")
        if mount is None:
            pytest.skip("the grader's own cgroup v2 is tested as 'cgroup2'")
        mech, folders = limits.Cgroup2, {"memory": mount / name, "pids": mount / name}
    else:
        mech = limits.MECHANISMS[mechanism]
        folders = mech.folders(name)
    for path in set(folders.values()):
        path.mkdir()

    def join():
        for path in set(folders.values()):
            (path / "cgroup.procs").write_text(str(os.getpid()))

    forks = "import os, time\nfor _ in range(3):\n    os.fork()\n"
    forks += "os.write(1, b'%d\\n' % os.getpid())\ntime.sleep(60)"  # one write: one line
    proc = subprocess.Popen(
        [sys.executable, "-c", forks], stdout=subprocess.PIPE, text=True, preexec_fn=join
    )
    try:
        pids = {int(proc.stdout.readline()) for _ in range(8)}  # all 8 started and joined
        assert mech.empty(folders, within=10.0) is True
        assert not any(path.exists() for path in folders.values())
        proc.wait(timeout=10)
        assert not [p for p in pids if _running(p)]
    finally:
        proc.kill()
        proc.wait()
        for path in set(folders.values()):
            limits.kill_listed(path)
            with contextlib.suppress(OSError):
                path.rmdir()


def _running(pid: int) -> bool:
    """Whether pid is a process that has not ended (a zombie has)."""
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
