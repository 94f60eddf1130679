"""Exercise 4.1's check (the capstone) against answers that hard-code what a single
configuration keeps fixed (issue 49; the answers in tests/drawn_answers/ex_4_1.py, also in
the sweep): where each mistake showed is named, each message is true of its answer, and a
load that races rank 0's save is caught on every run."""

from __future__ import annotations

import pytest
from drawn_answers.ex_4_1 import (
    epochs_counted_from_one,
    per_rank_batch_for_two_ranks,
    reloads_without_a_barrier,
    sampler_in_data_order,
    saves_once_after_training,
    trains_two_epochs_whatever_it_is_asked,
)

from ddp_helpers.exercises.lesson04 import capstone


@pytest.mark.parametrize(
    "answer, mistake, said",
    [
        # The epochs it was asked for, and the passes it made (check() asks for 3 first).
        (trains_two_epochs_whatever_it_is_asked, "passes", "asked for 3 epochs"),
        (epochs_counted_from_one, "passes", "on its data 2 time(s)"),
        # One save, after the last epoch: epochs 0 and 1 of 3 ended without one.
        (saves_once_after_training, "ckpt_epochs", "after 1 of the 3 epochs"),
        (saves_once_after_training, "ckpt_epochs", "after epoch(s) 0 and 1."),
        # Rank 0's share of 2 in the data set's order: items 0, 2, 4, 6.
        (sampler_in_data_order, "epoch_unshuffled", "(0, 2, 4, 6, ...)"),
        # GLOBAL_BATCH // 2 rows is right on 2 ranks: the 3-rank layout shows it.
        (per_rank_batch_for_two_ranks, "batch_other", "Seen with 3 ranks, 1 machine(s)"),
        (per_rank_batch_for_two_ranks, "batch_other", "held 8 examples"),
    ],
    ids=["two epochs", "from one", "one save", "saves named", "unshuffled", "3 ranks", "rows"],
)
def test_the_capstones_answers_that_hold_in_one_configuration_only(answer, mistake, said):
    result = capstone.exercise.evaluate(answer)
    assert result.mistake == mistake, result.message
    assert said in result.message


def test_a_load_with_no_barrier_after_rank_0s_save_is_caught_every_time():
    # Rank 1's torch.load races rank 0's torch.save; most runs it finds no file, some the
    # last epoch's, some a whole one. Judged by the collectives between them, every run.
    found = [capstone.exercise.evaluate(reloads_without_a_barrier) for _ in range(20)]
    assert [r.mistake for r in found] == ["ckpt_no_barrier"] * 20
    assert "Rank 1 loaded the checkpoint" in found[0].message
