"""Exercise 5.5's check (load_sharded, DCP) against its answers (tests/drawn_answers/ex_5_5.py):
each wrong one named by its mistake, with what its message says true of it; the right ones,
written other ways, pass, the grader's extra cases (3 ranks saving, 2 loading) included.

The course-wide tests (test_answers.py's sweep, test_spaces.py) hold 5.5 as
every exercise; this file holds what is its own."""

from __future__ import annotations

from drawn_answers.ex_5_5 import ANSWERS, load_without_set_state_dict

from ddp_helpers.exercises.lesson05 import resume, round_trip

WRONG, RIGHT = ANSWERS["5.5"]
EX = resume.exercise


def _name(value):
    return getattr(value, "__name__", value)


def test_without_set_state_dict_the_tensors_land_and_the_learning_rate_does_not():
    # torch 2.13: get_state_dict hands dcp.load the model's parameters (sharing storage) and
    # the optimizer's own state tensors, so they are loaded in place; the schedule's learning
    # rate, a float, only lands in the dict.
    result = EX.evaluate(load_without_set_state_dict)
    what = result.fields["what"]
    assert (what.key, what.fields["what"]) == ("state_opt_groups", "lr")
    assert what.fields["want"] == round_trip.LR / 2 and what.fields["got"] == round_trip.LR
