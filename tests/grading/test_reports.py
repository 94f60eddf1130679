"""The CSV, the feedback and the summary, as logic (grading/outputs/reports.py)."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

from grading_common import _sub

from ddp_helpers.grading import (
    Event,
    ExerciseScore,
    Outcome,
    Row,
    Status,
    Submission,
)
from ddp_helpers.grading.outputs import reports

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


def test_feedback_files_never_share_a_name():
    subs = [
        Submission(Path(n), n)
        for n in ["a b.ipynb", "a_b.ipynb", "x/y__z.ipynb", "x__y/z.ipynb", "q" * 300 + ".ipynb"]
    ]
    names = reports.feedback_names(subs)
    assert len(set(names.values())) == len(subs)
    assert all(len(n) <= 130 and n.endswith(".md") for n in names.values())
