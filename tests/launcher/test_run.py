"""The run loop's phases and reasons as logic (launcher/run.py): no processes."""

from __future__ import annotations

import pytest

from ddp_helpers.launcher.output import OutputRouter
from support import Sink


def _run_at_rest():
    from ddp_helpers.launcher.protocol import Call, LaunchRequest
    from ddp_helpers.launcher.run import Run

    req = LaunchRequest("1", Call(b""), 2, "gloo", {}, [{}, {}], 1, "/", [], {}, 0, 0, {})
    return Run(None, req, None, OutputRouter(2, ordered=True, sink=Sink()))


def test_a_run_moves_only_along_its_phases():
    from ddp_helpers.launcher.run import NEXT, Phase

    run = _run_at_rest()
    for phase in (Phase.REQUESTED, Phase.RUNNING, Phase.STOPPING, Phase.KILLED, Phase.DONE):
        assert phase in NEXT[run.phase]
        run._to(phase)
    assert run.done
    with pytest.raises(RuntimeError, match="from Phase.DONE to Phase.RUNNING"):
        run._to(Phase.RUNNING)
    again = _run_at_rest()
    again._to(Phase.REQUESTED)
    with pytest.raises(RuntimeError):  # a timeout's stacks are asked of ranks that exist
        again._to(Phase.DUMPING)


def test_the_weightiest_reason_to_stop_is_the_one_the_run_reports():
    from ddp_helpers.launcher.run import Reason

    run = _run_at_rest()
    run._because(Reason.TIMEOUT)
    run._because(Reason.FAILURE)  # a failure after the timeout: still a timeout
    assert run.reason is Reason.TIMEOUT and run.end().timed_out
    run._because(Reason.LAUNCHER_DIED)
    end = run.end()
    assert (end.launcher_died, end.timed_out, run.interrupted) == (True, False, False)
