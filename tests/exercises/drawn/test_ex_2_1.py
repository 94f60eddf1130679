"""Exercise 2.1's check against answers that keep a first answer, decide by the rank or name a
device (issue 49; the answers in tests/drawn_answers/ex_2_1.py, also in the sweep)."""

from __future__ import annotations

from drawn_answers.ex_2_1 import backend_chosen_once, backend_if_my_gpu_exists

from ddp_helpers.exercises import lesson02
from ddp_helpers.exercises.lesson02 import backend


def test_a_backend_chosen_once_gives_two_answers_in_one_environment():
    result = lesson02.q1.evaluate(backend_chosen_once)
    assert result.mistake == "backend_kept", result.message
    assert "'nccl' in one process and 'gloo' in another" in result.message
    # The two processes' first calls were on machines with other backends: what each
    # answered everywhere is what its first call found.
    calls = backend._calls(0)
    first, other = (calls[order[0]] for order in backend._orders(calls))
    assert backend._want(*first[:3]) != backend._want(*other[:3])


def test_ranks_of_one_machine_that_disagree_are_named_with_both_local_ranks():
    result = lesson02.q1.evaluate(backend_if_my_gpu_exists)
    assert result.mistake == "backend_ranks_differ", result.message
    assert "'nccl' as local rank 0 and 'gloo' as local rank 1" in result.message
    assert "a machine with 1 GPU(s) running 2 rank(s)" in result.message
