"""Exercise 5.5's check (load_sharded, DCP) against its answers (tests/drawn_answers/ex_5_5.py):
each wrong one named by its mistake, with what its message says true of it; the right ones,
written other ways, pass, the grader's extra cases (3 ranks saving, 2 loading) included.

Lesson 05 is not in LESSONS yet, so the course-wide tests (test_answers.py's sweep,
test_spaces.py, test_checks.py) do not see exercise 5.5: the tests below run it directly,
with the same holds (lesson05_support.py). Once lesson 05 is registered those take it over."""

from __future__ import annotations

import pytest
from drawn_answers.ex_5_5 import ANSWERS, load_without_set_state_dict
from lesson05_support import (
    assert_declared_time,
    assert_judged,
    assert_right_passes,
    assert_space_by_its_rules,
    assert_space_seen_drawn,
    assert_wrong_named,
)

from ddp_helpers.exercises.lesson05 import resume, round_trip

pytestmark = pytest.mark.usefixtures("no_leftovers")

WRONG, RIGHT = ANSWERS["5.5"]
EX = resume.q5


def _name(value):
    return getattr(value, "__name__", value)


@pytest.mark.parametrize(("answer", "key"), WRONG, ids=_name)
def test_a_wrong_load_sharded_is_named_by_its_mistake(answer, key, monkeypatch):
    assert_wrong_named(EX, answer, key, monkeypatch, launches=round_trip)


@pytest.mark.parametrize("answer", RIGHT, ids=_name)
def test_a_right_load_sharded_written_otherwise_passes(answer):
    assert_right_passes(EX, answer)


def test_every_mistake_of_5_5_is_made_by_some_answer_or_judged():
    made = {key for _, key in WRONG} | {"ckpt_resumed"}  # judged: test_a_resume_that_...
    assert made == set(EX.mistakes) - {"mismatch"}
    assert len(WRONG) >= 3 and len(RIGHT) >= 2


def test_without_set_state_dict_the_tensors_land_and_the_learning_rate_does_not():
    # torch 2.13: get_state_dict hands dcp.load the model's parameters (sharing storage) and
    # the optimizer's own state tensors, so they are loaded in place; the schedule's learning
    # rate, a float, only lands in the dict.
    result = EX.evaluate(load_without_set_state_dict)
    what = result.fields["what"]
    assert (what.key, what.fields["what"]) == ("state_opt_groups", "lr")
    assert what.fields["want"] == round_trip.LR / 2 and what.fields["got"] == round_trip.LR


def test_a_resume_that_leaves_the_run_that_never_stopped_is_named():
    # No load can reach it once the state loaded is the state saved: judged from a record.
    import torch

    state = {"model": {"w": torch.ones(2)}, "state": {}, "groups": [{"lr": 0.005}]}
    saving = {"saved": state, "after": {"w": torch.ones(2)}}
    loading = {"loaded": state, "entries": 1, "after": {"w": torch.ones(2) + 1e-3}}
    assert_judged(EX, lambda: resume._judge_load(saving, loading, 3), "ckpt_resumed")


def test_5_5_declares_its_space_by_the_rules():
    assert_space_by_its_rules(EX)


def test_what_5_5_draws_is_seen_drawn(tmp_path):
    assert_space_seen_drawn(EX, tmp_path)


def test_the_5_5_check_stays_within_its_declared_time():
    assert_declared_time(EX)
