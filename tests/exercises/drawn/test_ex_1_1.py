"""Exercise 1.1's check against answers that hold in one layout or for one call only (issue 49;
the answers in tests/drawn_answers/ex_1_1.py, also in the sweep): the layout and the call a
mistake showed in are named, and what the message says of the answer is so."""

from __future__ import annotations

import pytest
from drawn_answers.ex_1_1 import (
    gpu_cached,
    gpu_from_rank_less_two_per_machine,
    gpu_from_rank_modulo_two,
    gpu_kept_in_a_dict,
)

from ddp_helpers.exercises import lesson01


@pytest.mark.parametrize("answer", [gpu_kept_in_a_dict, gpu_cached], ids=["dict", "cache"])
def test_an_answer_that_keeps_its_first_device_is_named_with_both_processes(answer):
    result = lesson01.q1.evaluate(answer)
    assert result.mistake == "gpu_kept", result.message
    fields = result.fields
    # True of a kept answer: each process answered what its own first call found, and the
    # two first calls were as the local ranks named.
    assert fields["got"] == f"cuda:{fields['first']}"
    assert fields["other"] == f"cuda:{fields['other_first']}"
    assert fields["got"] != fields["want"] and fields["first"] != fields["other_first"]
    assert "call 2 of the answer in one process" in result.message


def test_an_answer_right_only_for_two_ranks_a_machine_is_named_where_it_shows():
    result = lesson01.q1.evaluate(gpu_from_rank_modulo_two)  # 1 machine x 3 ranks
    assert result.mistake == "gpu_node" and "Ranks 0, 2 on machine 0" in result.message
    assert "3 ranks, 1 machine(s)" in result.message
    result = lesson01.q1.evaluate(gpu_from_rank_less_two_per_machine)  # 2 machines x 3 ranks
    assert result.mistake == "gpu_other" and "6 ranks, 2 machine(s)" in result.message


def test_the_right_answer_is_not_called_kept_though_a_rank_repeats_a_device():
    # RANK % 2 gives rank 2 of 1 x 3 what rank 0's process first returned: the same in
    # every process, so not kept from a first call.
    assert lesson01.q1.evaluate(gpu_from_rank_modulo_two).mistake != "gpu_kept"
