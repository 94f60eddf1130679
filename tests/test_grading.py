"""`python -m ddp_helpers grade`: statuses, scores, feedback, clean-up, as instructors see them."""

from __future__ import annotations

import csv
import io
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import cloudpickle
import nbformat
import psutil
import pytest
from fixtures.submissions import ESCAPEE_SECONDS, NAMES, make_submissions

from ddp_helpers import _grade_worker as worker
from ddp_helpers import grading
from ddp_helpers.exercises import lesson01, lesson02

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 45  # the notebooks take 5-25 s here with two graded at once


def _grader_processes(tmp: Path) -> list[psutil.Process]:
    """Processes left by a grading run under tmp: workers, kernels, scorers, ranks, escapees.

    Everything a run starts works in a folder under tmp (the grader's folder, or the
    TMPDIR given to it), so this finds them and nothing else that runs on the machine.
    """
    found = []
    for p in psutil.process_iter():
        try:
            if p.pid != os.getpid() and p.status() != psutil.STATUS_ZOMBIE:
                if Path(p.cwd()).is_relative_to(tmp):
                    found.append(p)
        except (psutil.Error, OSError):
            continue
    return found


def _env(tmp: Path) -> dict:
    (tmp / "tmpdir").mkdir(exist_ok=True)
    return dict(os.environ, TMPDIR=str(tmp / "tmpdir"))


def _grade_cli(args, cwd, timeout=900):
    return subprocess.run(
        [sys.executable, "-m", "ddp_helpers", "grade", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_env(cwd),
    )


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    """The four solutions, the four lessons and every fixture, graded in one batch."""
    tmp = tmp_path_factory.mktemp("grading")
    expected = make_submissions(tmp / "subs")
    started = time.monotonic()
    run = _grade_cli(
        ["subs", "--out", "grades.csv", "--feedback", "feedback"]
        + ["--timeout", str(TIMEOUT), "--jobs", "2"],
        cwd=tmp,
    )
    seconds = time.monotonic() - started
    left = _grader_processes(tmp)
    temporary = list((tmp / "tmpdir").iterdir())
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
        "seconds": seconds,
    }


def test_batch_exits_cleanly_and_grades_every_submission(batch):
    run = batch["run"]
    assert run.returncode == 0, run.stderr
    assert sorted(batch["rows"]) == sorted(batch["expected"])
    assert batch["order"] == sorted(batch["order"]), "rows are not in submission order"


@pytest.mark.parametrize("name", sorted(NAMES.values()))
def test_solutions_score_full_marks_and_lessons_zero(batch, name):
    right, untouched = batch["rows"][f"right/{name}"], batch["rows"][f"untouched/{name}"]
    assert right["status"] == untouched["status"] == "ok"
    assert right["points"] == right["max_points"] != "0"
    assert untouched["points"] == "0" and untouched["max_points"] == right["max_points"]


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
    assert not wrong, "\n".join(wrong)


def test_csv_has_the_fixed_columns_then_one_per_exercise(batch):
    with open(batch["tmp"] / "grades.csv", newline="") as f:
        header = next(csv.reader(f))
    assert header[:5] == ["submission", "lesson", "status", "points", "max_points"]
    assert header[5:9] == [
        "1.1 gpu_for_this_rank",
        "1.2 shard",
        "1.3 predict_all_reduce",
        "1.4 predict_all_gather",
    ]
    assert len(header) == 5 + 14
    # A row of lesson 01 leaves the other lessons' exercise columns empty; invalid rows all.
    row = batch["rows"]["right/01_rank_and_world_size.ipynb"]
    assert row["2.1 pick_backend"] == "" and row["1.2 shard"] == "1"
    assert all(batch["rows"]["not_a_lesson/scratch.ipynb"][h] == "" for h in header[5:])


def test_no_process_or_temporary_folder_is_left(batch):
    assert not batch["left"], f"left running after grading: {batch['left']}"
    assert not batch["temporary"], f"left in TMPDIR: {batch['temporary']}"
    escapee = [
        p
        for p in psutil.process_iter(["cmdline"])
        if p.info["cmdline"] == ["sleep", ESCAPEE_SECONDS]
    ]
    assert not escapee, "the process the endless loop started in its own session survived"


def test_progress_lines_and_summary_are_printed(batch):
    err = batch["run"].stderr
    assert "Grading 16 submissions, 2 at a time; each notebook may run 45 s" in err
    assert "[16/16]" in err and "subs/right/03_ddp_wrap.ipynb" in err
    assert "status: ok 11 · timeout 1 · error 1 · invalid 3" in err
    # The endless loop timed out beside another submission, so it was graded again alone.
    assert "ran past the limit while others were being graded; grading" in err
    assert "1.2 shard" in err and "0.60 of 1  (n=5)" in err  # 3 of 5 lesson-01 runs pass 1.2
    assert "s per notebook run, 2 at a time)" in err


def _feedback(batch, name: str) -> str:
    stem = "subs__" + name.removesuffix(".ipynb").replace("/", "__")
    return (batch["tmp"] / "feedback" / f"{stem}.md").read_text()


def test_a_feedback_file_for_every_submission(batch):
    files = sorted(p.name for p in (batch["tmp"] / "feedback").iterdir())
    assert len(files) == len(batch["expected"]) and all(f.endswith(".md") for f in files)


def test_feedback_of_a_partly_wrong_submission_says_what_and_hints(batch):
    text = _feedback(batch, f"partly_wrong/{NAMES['01']}")
    assert "**2 of 4 points**" in text
    assert lesson01.MESSAGES["reduce_local"].format(got=[1, 2, 3]) in text
    assert f"💡 Hint: {lesson01.MESSAGES['reduce_hints'][0]}" in text
    assert "not attempted yet" in text  # 1.4 was left as the stub


def test_feedback_of_a_timeout_shows_where_it_was_stuck(batch):
    text = _feedback(batch, f"endless_loop/{NAMES['02']}")
    assert f"stopped after {TIMEOUT} s" in text
    assert "launch(spin, nprocs=2)" in text and "KeyboardInterrupt" in text
    assert "`average_gradients` is not defined" in text
    assert "so it was graded again alone; this is the result of that second try" in text


def test_feedback_of_a_dead_kernel_gives_the_exit_code(batch):
    text = _feedback(batch, f"exits/{NAMES['03']}")
    assert "The kernel died (exit code 3) while running code cell" in text
    assert "Ctrl-C will not work" not in text  # ipykernel's banner is not the learner's


def test_tampering_in_the_kernel_gains_nothing(batch):
    text = _feedback(batch, f"tampering/{NAMES['01']}")
    assert text.count("is the course's reference answer") == len(lesson01.EXERCISES)
    assert "faked" not in text


def test_stderr_output_and_warnings_cost_nothing(batch):
    assert batch["rows"][f"noisy/{NAMES['01']}"]["points"] == str(len(lesson01.EXERCISES))


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


# ---------------------------------------------------------------- without kernels


def _notebook(tmp_path, name, *sources) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    path = tmp_path / name
    nbformat.write(nb, path)
    return path


def test_lesson_is_told_from_the_imports_not_the_name(tmp_path):
    imports = "from ddp_helpers.exercises import lesson03 as ex"
    assert grading.lesson_of(_notebook(tmp_path, "mine.ipynb", imports)) == ("03", None)
    assert (
        grading.lesson_of(_notebook(tmp_path, "a.ipynb", "import ddp_helpers.exercises.lesson04"))[
            0
        ]
        == "04"
    )
    lesson, why = grading.lesson_of(_notebook(tmp_path, "02_process_group.ipynb", imports))
    assert lesson == "03" and "named like lesson 02" in why
    plain = "import ddp_helpers.exercises.lesson03"
    two = _notebook(tmp_path, "b.ipynb", plain, "from ddp_helpers.exercises import lesson01")
    assert "several lessons (01, 03)" in grading.lesson_of(two)[1]
    assert (
        "does not have"
        in grading.lesson_of(_notebook(tmp_path, "c.ipynb", imports.replace("03", "09")))[1]
    )
    (tmp_path / "d.ipynb").write_text('{"cells": 3}')
    assert "not in Jupyter's notebook format" in grading.lesson_of(tmp_path / "d.ipynb")[1]
    (tmp_path / "e.ipynb").write_bytes(b"\xff\xfe binary")
    assert "not UTF-8" in grading.lesson_of(tmp_path / "e.ipynb")[1]


def test_lesson_option_makes_other_lessons_invalid(tmp_path):
    _notebook(tmp_path, "x.ipynb", "from ddp_helpers.exercises import lesson03 as ex")
    (sub,) = grading.find_submissions([tmp_path], lesson="01")
    assert sub.problem == grading.MESSAGES["wrong_lesson"].format(found="03", wanted="01")


def test_folders_are_searched_and_checkpoints_skipped(tmp_path):
    _notebook(tmp_path, "a.ipynb", "1")
    (tmp_path / "deep" / ".ipynb_checkpoints").mkdir(parents=True)
    _notebook(tmp_path / "deep", "b.ipynb", "2")
    _notebook(tmp_path / "deep" / ".ipynb_checkpoints", "b-checkpoint.ipynb", "2")
    (tmp_path / "notes.txt").write_text("not graded: folders give their notebooks only")
    names = [Path(s.name).name for s in grading.find_submissions([tmp_path, tmp_path / "a.ipynb"])]
    assert names == ["a.ipynb", "b.ipynb"]


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


def test_progress_bar_on_a_terminal():
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    stream = Terminal()
    progress = grading.Progress(4, stream)
    sub = grading.Submission(Path("x.ipynb"), "x.ipynb", "01")
    progress.running = 1
    progress.finished(grading.Row(sub, "ok", 3, 3, seconds=2.0))
    assert "[1/4] ok         3/3    2.0 s  x.ipynb" in stream.getvalue()
    assert "[" + "#" * 8 + "." * 22 + "] 1/4 · 1 running" in stream.getvalue()
    plain = io.StringIO()
    grading.Progress(4, plain).finished(grading.Row(sub, "ok", 3, 3, seconds=2.0))
    assert "\x1b" not in plain.getvalue() and "#" not in plain.getvalue()


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


# ---------------------------------------------------------------- the scorer alone


def _answers(tmp_path, **answers) -> str:
    path = tmp_path / "answers.pkl"
    path.write_bytes(pickle.dumps({k: ("ok", cloudpickle.dumps(v)) for k, v in answers.items()}))
    for sub in ("tmp", "score"):
        (tmp_path / sub).mkdir(exist_ok=True)
    return str(path)


def test_an_answer_that_hangs_the_check_is_stopped_and_the_rest_still_scored(tmp_path):
    def shard(n, rank, world_size):
        while True:
            pass

    path = _answers(tmp_path, shard=shard, predict_all_reduce=lambda: [6, 6, 6])
    results, events = worker.score(path, "01", ["1.2", "1.3", "1.4"], str(tmp_path), limit=3)
    assert (
        results["1.2"]["status"] == "error"
        and "did not finish within 3 s" in results["1.2"]["message"]
    )
    assert results["1.3"]["status"] == "correct"
    assert results["1.4"]["status"] == "missing"
    assert [e["kind"] for e in events] == ["check_timeout"]


def test_an_answer_that_kills_the_scorer_costs_only_itself(tmp_path):
    def predict_all_reduce():
        os._exit(9)

    path = _answers(
        tmp_path, predict_all_reduce=predict_all_reduce, predict_all_gather=lambda: [[0, 1, 2]] * 3
    )
    results, events = worker.score(path, "01", ["1.2", "1.3", "1.4"], str(tmp_path), limit=30)
    assert results["1.3"] == {
        "status": "error",
        "message": worker.MESSAGES["check_died"].format(how="exit code 9"),
        "hint": None,
    }
    assert results["1.4"]["status"] == "correct" and results["1.2"]["status"] == "missing"
    assert [e["kind"] for e in events] == ["check_died"]


def _fake_grading(
    monkeypatch, slow: str, always: bool = False, seconds: float = 0.3, ctrl_c: str | None = None
) -> list:
    """grade_one replaced: `slow` times out when another submission runs beside it (always).

    Grading `ctrl_c` presses Ctrl-C. Returns the calls made, as (submission name, how
    many ran at once at any time).
    """
    import _thread
    import threading

    lock, running, calls = threading.Lock(), [0], []
    exercises = grading.exercises_of("01")

    def fake(sub, timeout, cancel=None, tmp_root=None):
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
        results = [
            {
                "id": e.id,
                "name": e.name,
                "max": e.points,
                "points": 0 if timed_out else 1,
                "status": "not_attempted" if timed_out else "correct",
            }
            for e in exercises
        ]
        points = sum(r["points"] for r in results)
        status = "timeout" if timed_out else "ok"
        return grading.Row(sub, status, points, len(exercises), results, [], seconds)

    monkeypatch.setattr(grading, "grade_one", fake)
    return calls


def _three_copies(tmp_path) -> list[str]:
    for who in ("a", "b", "c"):
        (tmp_path / who).mkdir()
        (tmp_path / who / NAMES["01"]).write_bytes((ROOT / "solutions" / NAMES["01"]).read_bytes())
    return [str(tmp_path / who) for who in ("a", "b", "c")]


def _grade_three(tmp_path, jobs: int, err) -> list:
    """Copies a, b, c of solution 01 graded (by the fake) into g.csv and fb/."""
    return grading.grade(
        _three_copies(tmp_path),
        out=tmp_path / "g.csv",
        feedback=tmp_path / "fb",
        jobs=jobs,
        timeout=5,
        stream=err,
    )


def test_a_timeout_beside_other_submissions_is_graded_again_alone(tmp_path, monkeypatch):
    calls = _fake_grading(monkeypatch, slow=str(tmp_path / "b"))
    err = io.StringIO()
    rows = _grade_three(tmp_path, 2, err)
    b = [c for c in calls if c[0].startswith(str(tmp_path / "b"))]
    assert [crowd for _, crowd in b] == [2, 1], calls  # beside a, then alone
    row = next(r for r in rows if r.submission.name.startswith(str(tmp_path / "b")))
    assert (row.status, row.points) == ("ok", len(lesson01.EXERCISES))
    assert row.seconds == pytest.approx(0.6)  # both tries are counted in its time
    assert "1 submission ran past the limit while others were being graded; grading it again" in (
        err.getvalue()
    )
    csv_rows = list(csv.DictReader(open(tmp_path / "g.csv", newline="")))
    assert [r["status"] for r in csv_rows] == ["ok", "ok", "ok"]
    feedback = "\n".join(p.read_text() for p in (tmp_path / "fb").iterdir())
    assert feedback.count("so it was graded again alone") == 1
    assert "stopped at its time limit (0.3 s in all) while 1 other submission shared" in feedback


@pytest.mark.parametrize(("jobs", "tries"), [(1, 1), (2, 2)])
def test_a_timeout_alone_is_final(tmp_path, monkeypatch, jobs, tries):
    calls = _fake_grading(monkeypatch, slow=str(tmp_path / "b"), always=True)
    err = io.StringIO()
    rows = _grade_three(tmp_path, jobs, err)
    b = [crowd for name, crowd in calls if name.startswith(str(tmp_path / "b"))]
    assert len(b) == tries and b[-1] == 1  # with one job its only try was alone already
    assert [r.status for r in rows] == ["ok", "timeout", "ok"]
    notes = [e["kind"] for e in rows[1].events]
    assert notes == (["retried"] if jobs == 2 else [])
    assert ("grading it again" in err.getvalue()) == (jobs == 2)


def test_ctrl_c_before_the_second_try_keeps_the_first(tmp_path, monkeypatch):
    # a and b run together and b times out; Ctrl-C comes while c runs, before b's retry.
    _fake_grading(monkeypatch, slow=str(tmp_path / "b"), ctrl_c=str(tmp_path / "c"))
    handlers = {
        sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    }
    err = io.StringIO()
    try:
        with pytest.raises(KeyboardInterrupt):
            _grade_three(tmp_path, 2, err)
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


def test_ctrl_c_stops_the_batch_and_everything_it_started(tmp_path):
    make_submissions(tmp_path / "subs")
    proc = subprocess.Popen(
        [sys.executable, "-m", "ddp_helpers", "grade", "subs/endless_loop", "subs/malformed"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(tmp_path),
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any(
        "ipykernel" in " ".join(p.cmdline())
        for p in psutil.Process(proc.pid).children(recursive=True)
        if p.is_running()
    ):
        time.sleep(0.2)
    time.sleep(3)  # into the notebook
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Interrupted: 1 of 2 graded" in err
    rows = list(csv.DictReader(open(tmp_path / "grades.csv", newline="")))
    assert [r["status"] for r in rows] == ["invalid"]
    assert not _grader_processes(tmp_path)
    assert not list((tmp_path / "tmpdir").iterdir())


def test_a_worker_killed_from_outside_costs_its_row_only_and_leaves_nothing(tmp_path):
    make_submissions(tmp_path / "subs")
    proc = subprocess.Popen(
        [sys.executable, "-m", "ddp_helpers", "grade", "subs/endless_loop", "subs/right"]
        + ["--jobs", "2", "--timeout", "60", "--feedback", "feedback"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(tmp_path),
    )
    worker_pid = None
    deadline = time.monotonic() + 60
    while worker_pid is None and time.monotonic() < deadline:
        for p in psutil.Process(proc.pid).children():
            cmd = " ".join(p.cmdline())
            if "endless_loop" in cmd and any(
                "ipykernel" in " ".join(c.cmdline()) for c in p.children()
            ):
                worker_pid = p.pid
        time.sleep(0.2)
    assert worker_pid is not None, "the endless loop's worker and kernel did not start"
    time.sleep(4)  # its kernel is in the loop, with two ranks
    os.kill(worker_pid, signal.SIGKILL)  # as the out-of-memory killer would
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    rows = {r["submission"]: r for r in csv.DictReader(open(tmp_path / "grades.csv"))}
    assert rows["subs/endless_loop/02_process_group.ipynb"]["status"] == "error"
    assert [r["status"] for n, r in rows.items() if "right" in n] == ["ok"] * 4
    text = (tmp_path / "feedback" / "subs__endless_loop__02_process_group.md").read_text()
    assert "was killed by SIGKILL from outside" in text
    assert not _grader_processes(tmp_path)
    assert not list((tmp_path / "tmpdir").iterdir())


def test_an_answer_that_forks_cannot_hold_the_scorer(tmp_path):
    def predict_all_reduce():
        if os.fork() == 0:  # a child that keeps the result pipe open
            time.sleep(60)
            os._exit(0)
        return [6, 6, 6]

    path = _answers(tmp_path, predict_all_reduce=predict_all_reduce)
    started = time.monotonic()
    results, events = worker.score(path, "01", ["1.3"], str(tmp_path), limit=20)
    assert time.monotonic() - started < 15
    assert results["1.3"]["status"] == "correct" and not events


def test_the_reference_wrapped_in_a_partial_is_still_the_reference():
    import functools

    assert (
        worker._from_course(functools.partial(lesson01.shard)) == "ddp_helpers.exercises.lesson01"
    )
    assert worker._from_course(functools.wraps(lesson01.shard)(lambda *a: 0)) is not None
    assert worker._from_course(lambda n, rank, world_size: [rank]) is None


def test_feedback_files_never_share_a_name():
    subs = [
        grading.Submission(Path(n), n)
        for n in ["a b.ipynb", "a_b.ipynb", "x/y__z.ipynb", "x__y/z.ipynb", "q" * 300 + ".ipynb"]
    ]
    names = grading.feedback_names(subs)
    assert len(set(names.values())) == len(subs)
    assert all(len(n) <= 130 and n.endswith(".md") for n in names.values())


def test_a_lesson_that_imports_an_older_lessons_checks_is_still_itself(tmp_path):
    both = "from ddp_helpers.exercises import lesson02 as ex\n"
    both += "from ddp_helpers.exercises import lesson01"
    assert grading.lesson_of(_notebook(tmp_path, "mine.ipynb", both)) == ("02", None)
