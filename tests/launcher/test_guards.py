"""launch(..., guards=False) and `%%ddp --no-guards`: ranks that run and end as under
torchrun, what the cell is told when one aborts or hangs at exit, and a zygote unharmed by
its ranks' normal exits (docs/launcher.md, "Guards")."""

from __future__ import annotations

import pytest

from ddp_helpers import DistributedError, launch
from ddp_helpers.launcher import client
from ddp_helpers.launcher.plan import Options, shared_environment


def test_without_guards_the_init_barrier_is_the_users_own():
    env, _ = shared_environment({}, 2, "gloo", 2, "lo", guards=False)
    assert "TORCH_DIST_INIT_BARRIER" not in env
    env, _ = shared_environment({"TORCH_DIST_INIT_BARRIER": "1"}, 2, "gloo", 2, "lo", False)
    assert env["TORCH_DIST_INIT_BARRIER"] == "1"
    env, _ = shared_environment({}, 2, "gloo", 2, "lo")
    assert env["TORCH_DIST_INIT_BARRIER"] == "1"
    with pytest.raises(ValueError, match="guards must be True or False"):
        Options.checked(guards="no")


def _forgets_its_group(marker: str) -> float:
    import atexit
    import os

    import torch
    import torch.distributed as dist

    atexit.register(lambda: open(f"{marker}.{os.environ['RANK']}", "w").close())
    dist.init_process_group("gloo")
    t = torch.ones(1)
    dist.all_reduce(t)
    return t.item()  # the group is never destroyed: freed, if at all, at the exit


def test_a_job_that_never_destroys_its_group_runs_unguarded_and_the_zygote_lives_on(tmp_path):
    # Its values come back (an abort at the exit, which gloo may do here, only adds a note),
    # each rank's atexit handler ran, and the zygote the ranks were forked from, whose
    # frames they unwound to exit, serves the next launches, guarded or not.
    marker = tmp_path / "exited"
    assert list(launch(_forgets_its_group, str(marker), guards=False, timeout=60)) == [2.0, 2.0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exited.0", "exited.1"]
    zygote = client.get()
    assert zygote.alive()
    assert list(launch(_forgets_its_group, str(tmp_path / "kept"), timeout=60)) == [2.0, 2.0]
    assert list(launch(_forgets_its_group, str(marker), guards=False, timeout=60)) == [2.0, 2.0]
    assert client.get() is zygote and zygote.alive()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exited.0", "exited.1"]


def _aborts_at_exit() -> str:
    import atexit
    import os

    if os.environ["RANK"] == "1":
        atexit.register(os.abort)  # as gloo's "terminate called ..." does at exit
    return "done"


def test_an_abort_at_exit_after_the_result_is_told_as_the_ranks_own_exit(capsys):
    assert list(launch(_aborts_at_exit, guards=False, timeout=60)) == ["done", "done"]
    err = capsys.readouterr().err
    assert "rank 1 was killed by SIGABRT at exit, after it had returned its result" in err
    assert "not in the launcher" in err and "torchrun" in err
    assert "rank 0" not in err
    # With the guards the rank ends with os._exit: no atexit handler, no abort.
    assert list(launch(_aborts_at_exit, timeout=60)) == ["done", "done"]
    assert "at exit" not in capsys.readouterr().err


def _sleep_at_exit() -> None:
    import time

    time.sleep(60)


def _hangs_at_exit() -> str:
    import atexit

    atexit.register(_sleep_at_exit)
    return "done"


def test_a_rank_that_hangs_at_exit_without_guards_is_said_to_have_returned():
    with pytest.raises(DistributedError) as caught:
        launch(_hangs_at_exit, nprocs=1, guards=False, timeout=2)
    assert caught.value.kind == "timeout"
    report = caught.value.render()
    assert "rank 0: had returned its result, then hung at exit" in report, report
    assert "_sleep_at_exit" in report, report  # where it hung, the atexit handler's line


def test_the_magic_passes_no_guards_on(monkeypatch):
    from IPython.core.interactiveshell import InteractiveShell

    from ddp_helpers import magic

    calls = []
    monkeypatch.setattr(magic, "run_cell", lambda *a, **k: calls.append(k["guards"]))
    shell = InteractiveShell.instance()
    magic.register(shell)
    shell.run_cell_magic("ddp", "-n 2 --no-guards", "x = 1\n")
    shell.run_cell_magic("ddp", "-n 2", "x = 1\n")
    assert calls == [False, True]
