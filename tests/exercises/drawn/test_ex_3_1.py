"""Exercise 3.1's check against answers that return the model inside the DDP, keep the first
DDP or change the dtype (issue 49; the answers in tests/drawn_answers/ex_3_1.py, also in the
sweep): each message is true of the answer that gets it."""

from __future__ import annotations

from drawn_answers.ex_3_1 import (
    wrap_in_float32,
    wrap_once_per_process,
    wrap_returning_the_module_inside,
)

from ddp_helpers.exercises import lesson03
from ddp_helpers.exercises.kit import process_group, run_on_ranks
from ddp_helpers.exercises.lesson03 import wrap


def _inner_weights_are_rank_zeros(answer):
    """On a rank: what the answer returns is the module of a DDP, holding rank 0's weights."""
    import torch
    import torch.distributed as dist

    with process_group():
        model = wrap._rank_model(dist.get_rank(), "small", "float32")
        returned = answer(model, torch.device("cpu"))
        mine = [p.detach().clone() for p in returned.parameters()]
        theirs = [p.clone() for p in mine]
        for p in theirs:
            dist.broadcast(p, 0)
        return returned is model and all(
            torch.equal(a, b) for a, b in zip(mine, theirs, strict=True)
        )


def test_the_module_inside_is_named_as_such_and_its_weights_are_rank_zeros():
    result = lesson03.q1.evaluate(wrap_returning_the_module_inside)
    assert result.mistake == "wrap_inner", result.message
    assert "kept its own" not in result.message  # what issue 49 found said so, falsely
    # What the message says: the model inside, with rank 0's weights on every rank.
    assert all(run_on_ranks(_inner_weights_are_rank_zeros, wrap_returning_the_module_inside))


def test_the_first_ddp_returned_again_and_a_changed_dtype_are_named_at_the_second_call():
    kept = lesson03.q1.evaluate(wrap_once_per_process)
    assert kept.mistake == "wrap_kept" and "call 2 of the answer" in kept.message
    dtype = lesson03.q1.evaluate(wrap_in_float32)
    assert dtype.mistake == "wrap_dtype"
    assert (dtype.fields["want"], str(dtype.fields["got"].items)) == ("float64", "['float32']")
