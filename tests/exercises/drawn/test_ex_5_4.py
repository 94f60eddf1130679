"""Exercise 5.4's check (save_sharded, DCP) against its answers (tests/drawn_answers/ex_5_4.py):
each wrong one named by its mistake, with what its message says true of it; the right ones,
written other ways, pass, the grader's extra cases (3 ranks saving, 2 loading) included.

The course-wide tests (test_answers.py's sweep, test_spaces.py) hold 5.4 as
every exercise; this file holds what is its own."""

from __future__ import annotations

import sys

import cloudpickle
import pytest
from drawn_answers.ex_5_4 import (
    ANSWERS,
    save_the_full_state_gathered_on_rank_zero,
    save_the_full_state_with_dcp,
    save_the_state_dict_with_torch_save_on_rank_zero,
)

from ddp_helpers.exercises.lesson05 import checkpoint, round_trip

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # _saved_by runs on the ranks

WRONG, RIGHT = ANSWERS["5.4"]
EX = checkpoint.exercise


def _name(value):
    return getattr(value, "__name__", value)


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


def test_a_plain_process_cannot_use_one_ranks_torch_saved_shards(tmp_path):
    # torch 2.13: what torch.save wrote on rank 0 loads in a process with no group as
    # DTensors of rank 0's rows, which neither gather (their process group is the saving
    # job's) nor load into a plain model (DTensors and plain tensors do not mix).
    import torch
    import torch.distributed.tensor  # noqa: F401 - weights_only loads DTensors once imported

    from ddp_helpers.exercises.kit import Answer, run_on_ranks
    from ddp_helpers.exercises.lesson05.common import make_model

    path = str(tmp_path / "ckpt")
    answer = Answer(save_the_state_dict_with_torch_save_on_rank_zero)
    run_on_ranks(_saved_by, answer, path, nprocs=2)
    weight = torch.load(path, weights_only=True)["model"]["embed.weight"]
    assert type(weight).__name__ == "DTensor"
    assert weight.to_local().shape[0] < weight.shape[0]
    with pytest.raises(RuntimeError, match="process group"):
        weight.full_tensor()
    with pytest.raises(RuntimeError, match="mixed torch.Tensor and DTensor"):
        state = torch.load(path, weights_only=True)["model"]
        make_model(width=weight.shape[0]).load_state_dict(state)


def _saved_by(save, path):
    """On each rank: a sharded model and its Adam, saved by `save` at path."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from ddp_helpers.exercises.kit import process_group

    case = {"width": 16, "depth": 3, "dtype": "float32"}
    with process_group():
        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        save(*round_trip._sharded(case, mesh, seed=0), path)


def test_the_resumed_step_is_the_never_stopped_one_to_within_the_tolerance():
    # The reference both ways, saved on 2 ranks and resumed on 3, and 3 then 2: the state
    # loaded is the state saved, bit for bit, and one more step rounds apart from the run
    # that never stopped by a unit or two of the dtype (fsdp.TOLERANCE's comment).
    import torch

    worst = 0.0

    def judge(saving, loading, loaded_on):
        nonlocal worst
        assert round_trip.state_apart(saving["saved"], loading["loaded"]) is None
        for name, want in saving["after"].items():
            got, eps = loading["after"][name].double(), torch.finfo(want.dtype).eps
            units = ((got - want.double()).abs() / want.double().abs().clamp(min=1)).max()
            worst = max(worst, units.item() / eps)

    for seed in (0, 1):
        worlds = round_trip.round_trip("5.4", EX.reference, round_trip.load_sharded, judge, seed)
        assert worlds == ((2, 3) if seed == 0 else (3, 2))
    assert worst <= round_trip.TOLERANCE / 8, worst
