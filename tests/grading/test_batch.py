"""The batch as logic (grading/orchestration/batch.py, progress.py): its scheduling, retries,
options and progress lines, without kernels."""

from __future__ import annotations

import csv
import io
import signal
import threading
from pathlib import Path

import nbformat
import pytest
from fixtures.submissions import NAMES
from grading_common import _row, _sub

from ddp_helpers import grading
from ddp_helpers.exercises import lesson01
from ddp_helpers.grading import (
    Batch,
    GradeOptions,
    Status,
    Submission,
    TimeBudget,
)
from ddp_helpers.grading.orchestration import batch as batch_module
from ddp_helpers.grading.orchestration.progress import Progress

# ---------------------------------------------------------------- the batch, as logic


def test_progress_bar_on_a_terminal():
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    stream = Terminal()
    progress = Progress(4, stream)
    sub = _sub("x.ipynb")
    progress.running = 1
    progress.finished(_row(sub, Status.OK, seconds=2.0))
    total = len(lesson01.EXERCISES)
    assert f"[1/4] ok         {total}/{total}    2.0 s  x.ipynb" in stream.getvalue()
    assert "[" + "#" * 8 + "." * 22 + "] 1/4 · 1 running" in stream.getvalue()
    plain = io.StringIO()
    Progress(4, plain).finished(_row(sub, Status.OK, seconds=2.0))
    assert "\x1b" not in plain.getvalue() and "#" not in plain.getvalue()


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


def _fake(slow: str, ctrl_c: str | None = None, seconds: float = 0.3):
    """A grader in place of the worker: `slow` times out when another submission runs beside
    it; grading `ctrl_c` presses Ctrl-C once the batch has settled the first two runs (slow's
    first try and its neighbour's row). Records (name, crowd) per call. No clock: the first
    two calls meet at a barrier (so they run beside each other), and Ctrl-C waits for the
    event it must come after (fake.settle, in place of Batch.settle, says when)."""
    import _thread
    import threading

    lock, running, calls = threading.Lock(), [0], []
    together = threading.Barrier(2, timeout=30)
    settled, settles = threading.Event(), []
    real_settle = Batch.settle

    def settle(batch, row):
        try:
            return real_settle(batch, row)
        finally:
            with lock:
                settles.append(row.submission.name)
                if len(settles) == 2:  # the two that ran together: slow and its neighbour
                    settled.set()

    def fake(sub, budget, cancel=None, tmp_root=None):
        if ctrl_c is not None and sub.name.startswith(ctrl_c):
            assert settled.wait(30), "the batch never settled the first two runs"
            _thread.interrupt_main()
            cancel.wait(10)  # as the real one does, it stops when the grader says so
        with lock:
            running[0] += 1
            first_two = len(calls) + running[0] <= 2
        if first_two:
            together.wait()  # both are running now
        with lock:
            crowd = running[0]
        if first_two:
            together.wait()  # both have counted the crowd
        with lock:
            running[0] -= 1
        calls.append((sub.name, crowd))
        timed_out = sub.name.startswith(slow) and crowd > 1
        status = Status.TIMEOUT if timed_out else Status.OK
        return _row(sub, status, seconds, right=not timed_out)

    fake.calls, fake.settle = calls, settle
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


def test_ctrl_c_before_the_second_try_keeps_the_first_and_restores_the_handlers(
    tmp_path, monkeypatch
):
    # a and b run together and b times out; Ctrl-C comes while c runs, before b's retry.
    fake = _fake(slow=str(tmp_path / "b"), ctrl_c=str(tmp_path / "c"))
    monkeypatch.setattr(Batch, "settle", fake.settle)  # to know when b's first try is in
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


class _SignalledOnEntry(threading.Condition):
    """The batch's lock, with Ctrl-C delivered to the main thread just after it took the
    lock in Condition.__enter__ (Python code: a signal's handler runs there), once; `taken`
    is set just after."""

    def __init__(self, taken: threading.Event):
        super().__init__()
        self.taken = taken

    def __enter__(self):
        entered = super().__enter__()
        if threading.current_thread() is threading.main_thread() and not self.taken.is_set():
            signal.raise_signal(signal.SIGINT)  # its handler runs here, the lock held
            self.taken.set()
        return entered


def test_ctrl_c_that_lands_while_the_main_thread_takes_the_lock_still_stops_the_batch(
    tmp_path, monkeypatch
):
    # Raised there, KeyboardInterrupt left the lock held (`with` never ran its exit) and
    # the workers waiting for it forever, the main thread joining them: a run of the test
    # above hung so. Now Ctrl-C is only noted while the threads run, then raised.
    # No clock: each grading waits until the main thread has taken the lock (a batch
    # graded whole before the main thread first took it would see no Ctrl-C at all, as a
    # loaded machine once let it).
    real_init, taken = batch_module._Run.__init__, threading.Event()

    def init(run, *args):
        real_init(run, *args)
        run.lock = _SignalledOnEntry(taken)

    fake = _fake(slow=str(tmp_path / "none"))

    def once_the_main_thread_took_the_lock(sub, budget, cancel=None, tmp_root=None):
        assert taken.wait(30), "the main thread never took the batch's lock"
        return fake(sub, budget, cancel, tmp_root)

    monkeypatch.setattr(batch_module._Run, "__init__", init)
    handlers = {
        sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    }

    def hung(signum, frame):
        raise TimeoutError("grade() did not return within 30 s of Ctrl-C: a deadlock")

    err = io.StringIO()
    before = signal.signal(signal.SIGALRM, hung)
    signal.alarm(30)  # a guard: a regression fails here instead of hanging the suite
    try:
        with pytest.raises(KeyboardInterrupt):
            _grade_three(tmp_path, 2, err, once_the_main_thread_took_the_lock)
        after = {sig: signal.getsignal(sig) for sig in handlers}
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, before)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    assert after == handlers, "grade() left Ctrl-C, SIGTERM or SIGHUP ignored"
    assert "Interrupted:" in err.getvalue() and (tmp_path / "g.csv").exists()
