"""Exercise 3.6's check against answers that hold in one configuration only (issue 49; the
answers in tests/drawn_answers/ex_3_6.py, also in the sweep): where each mistake showed is
named, and what each message says is true of its answer."""

from __future__ import annotations

import pytest
from drawn_answers.ex_3_6 import (
    MiniHookedOnTheIncomingGradient,
    MiniHookingEveryParameter,
    MiniWithTheLayoutWorkedOutOnce,
    MiniWithTheLocalWorldSize,
)

from ddp_helpers.exercises import lesson03


@pytest.mark.parametrize(
    "answer, mistake, tried",
    [
        (MiniHookedOnTheIncomingGradient, "mini_accumulate", {"step": 3}),
        (MiniWithTheLocalWorldSize, "mini_local", {"ranks": 4, "machines": 2}),
        (MiniHookingEveryParameter, "mini_frozen", {}),
        (MiniWithTheLayoutWorkedOutOnce, "mini_never", {"call": 2}),
    ],
    ids=["incoming gradient", "local world size", "every parameter", "layout once"],
)
def test_minis_that_hold_in_one_configuration_only(answer, mistake, tried):
    result = lesson03.q6.evaluate(answer)
    assert result.mistake == mistake, result.message
    assert tried.items() <= result.tried.items()


def test_a_frozen_parameter_named_is_the_one_torch_refused():
    result = lesson03.q6.evaluate(MiniHookingEveryParameter)
    assert "doesn't require gradient" in result.fields["error"]
