"""Exercise 5.4's check (save_sharded, DCP) against its answers (tests/drawn_answers/ex_5_4.py):
each wrong one named by its mistake, with what its message says true of it; the right ones,
written other ways, pass, the grader's extra cases (3 ranks saving, 2 loading) included.

Lesson 05 is not in LESSONS yet, so the course-wide tests (test_answers.py's sweep,
test_spaces.py, test_checks.py) do not see exercise 5.4: the tests below run it directly,
with the same holds (lesson05_support.py). Once lesson 05 is registered those take it over."""

from __future__ import annotations

import pytest
from drawn_answers.ex_5_4 import (
    ANSWERS,
    save_the_full_state_gathered_on_rank_zero,
    save_the_full_state_with_dcp,
    save_the_state_dict_with_torch_save_on_rank_zero,
)
from lesson05_support import (
    assert_declared_time,
    assert_judged,
    assert_right_passes,
    assert_space_by_its_rules,
    assert_space_seen_drawn,
    assert_wrong_named,
)

from ddp_helpers.exercises.lesson05 import checkpoint, round_trip

pytestmark = pytest.mark.usefixtures("no_leftovers")

WRONG, RIGHT = ANSWERS["5.4"]
EX = checkpoint.q4


def _name(value):
    return getattr(value, "__name__", value)


@pytest.mark.parametrize(("answer", "key"), WRONG, ids=_name)
def test_a_wrong_save_sharded_is_named_by_its_mistake(answer, key, monkeypatch):
    assert_wrong_named(EX, answer, key, monkeypatch, launches=round_trip)


@pytest.mark.parametrize("answer", RIGHT, ids=_name)
def test_a_right_save_sharded_written_otherwise_passes(answer):
    assert_right_passes(EX, answer)


def test_every_mistake_of_5_4_is_made_by_some_answer_or_judged():
    made = {key for _, key in WRONG} | {"ckpt_resume"}  # judged: test_a_resume_that_...
    assert made == set(EX.mistakes) - {"mismatch"}
    assert len(WRONG) >= 3 and len(RIGHT) >= 2


def test_what_torch_save_on_rank_zero_leaves_is_one_ranks_shards():
    # torch 2.13: model.state_dict() of an FSDP2 model is DTensors, rank 0's rows of each.
    result = EX.evaluate(save_the_state_dict_with_torch_save_on_rank_zero)
    assert result.tried["saved"] == 2
    assert result.fields["rows"] < result.fields["total"] <= 2 * result.fields["rows"]
    # Gathered whole, by torch.save on rank 0 or by DCP: refused, each with its own words.
    for answer, how in [
        (save_the_full_state_gathered_on_rank_zero, "ckpt_gathered_file"),
        (save_the_full_state_with_dcp, "ckpt_gathered_dcp"),
    ]:
        assert EX.evaluate(answer).fields["how"].key == how


def test_a_resume_that_leaves_the_run_that_never_stopped_is_named():
    # No save can reach it once the state loaded is the state saved: judged from a record.
    import torch

    state = {"model": {"w": torch.ones(2)}, "state": {}, "groups": [{"lr": 0.005}]}
    saving = {"saved": state, "after": {"w": torch.ones(2)}}
    loading = {"loaded": state, "after": {"w": torch.ones(2) + 1e-3}}
    assert_judged(EX, lambda: checkpoint._judge_save(saving, loading, 3), "ckpt_resume")


def test_the_resumed_step_is_the_never_stopped_one_to_within_the_tolerance():
    # The reference both ways, saved on 2 ranks and resumed on 3, and 3 then 2: the state
    # loaded is the state saved, bit for bit, and one more step rounds apart from the run
    # that never stopped by a unit or two of the dtype (fsdp.TOLERANCE's comment).
    import torch

    from ddp_helpers.exercises.lesson05 import resume

    worst = 0.0

    def judge(saving, loading, loaded_on):
        nonlocal worst
        assert round_trip.state_apart(saving["saved"], loading["loaded"]) is None
        for name, want in saving["after"].items():
            got, eps = loading["after"][name].double(), torch.finfo(want.dtype).eps
            units = ((got - want.double()).abs() / want.double().abs().clamp(min=1)).max()
            worst = max(worst, units.item() / eps)

    for seed in (0, 1):
        worlds = round_trip.round_trip("5.4", EX.reference, resume.load_sharded, judge, seed)
        assert worlds == ((2, 3) if seed == 0 else (3, 2))
    assert worst <= round_trip.TOLERANCE / 8, worst


def test_5_4_declares_its_space_by_the_rules():
    assert_space_by_its_rules(EX)


def test_what_5_4_draws_is_seen_drawn(tmp_path):
    assert_space_seen_drawn(EX, tmp_path)


def test_the_5_4_check_stays_within_its_declared_time():
    assert_declared_time(EX)
