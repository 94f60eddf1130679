"""The exercise machinery: hints, solutions, progress, a crashing or hanging answer.

That every reference passes its check is proven by the solution notebooks under nbval
(each check cell must print "correct", and test_answers.py proves each reference is the
notebook's own solution); that every stub is "not attempted", by the untouched lessons
run in JupyterLab (test_browser.py); every learner mistake and other right answer, by the sweep.
"""

from __future__ import annotations

import pytest

from ddp_helpers.exercises import lesson01, lesson02

pytestmark = pytest.mark.usefixtures("no_leftovers")


def test_hints_come_in_order_and_stop_at_the_last(capsys):
    ex = lesson01.q1
    ex._next_hint = 0
    for _ in range(len(ex.hints) + 1):
        ex.hint()
    out = capsys.readouterr().out
    assert out.index("Hint 1 of 3") < out.index("Hint 2 of 3") < out.index("Hint 3 of 3")
    assert out.count("Hint 3 of 3") == 2 and "last hint" in out


def test_solution_shows_the_reference_code(capsys):
    lesson01.q2.solution()
    assert "padded[rank::world_size]" in capsys.readouterr().out


def test_a_crashing_answer_is_an_error_with_a_short_traceback():
    def broken(n, rank, world_size):
        return [i for i in range(n)][rank] / 0

    result = lesson01.q2.evaluate(broken)
    assert result.status == "error"
    assert "ZeroDivisionError" in result.message and "in broken" in result.message
    assert "_core.py" not in result.message


def test_progress_lists_each_exercise_and_its_status(capsys):
    lesson01.progress.__globals__["_progress"](
        lesson01.EXERCISES, "01", {"shard": lesson01.shard, "predict_all_reduce": lambda: 6}
    )
    out = capsys.readouterr().out
    assert "Lesson 01: 1 of 4 exercises pass" in out
    assert "1.2  shard" in out and "correct" in out
    assert "1.3  predict_all_reduce       wrong" in out
    assert "1.4  predict_all_gather       missing" in out


def rank_zero_waits_forever(model):
    import torch.distributed as dist

    if dist.get_rank() == 0:
        dist.barrier()  # rank 1 goes on to DDP's all_reduce: mismatched, or a hang


def test_a_hang_in_a_check_is_reported_as_wrong_with_the_collective_hint(monkeypatch):
    import ddp_helpers.exercises._core as core

    real = core.run_on_ranks
    monkeypatch.setattr(
        "ddp_helpers.exercises.lesson02.run_on_ranks",
        lambda *a, **k: real(*a, **{**k, "timeout": 2}),
    )
    result = lesson02.q4.evaluate(rank_zero_waits_forever)
    assert result.status == "wrong", str(result)
    assert "did not" in result.message and "`if rank == 0:`" in result.hint
