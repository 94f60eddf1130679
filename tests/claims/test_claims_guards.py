"""What the course's launcher changes in a rank, and what `guards=False` gives back (lesson
01, cell 01-28): the three guards and rank 0 leaving last, each shown with them and without.
docs/claims.md names each claim's cell and its test here."""

from __future__ import annotations

import pytest

from ddp_helpers import launch


def _what_the_rank_sees(marker: str) -> dict:
    import atexit
    import gc
    import os
    import weakref

    import torch.distributed as dist

    rank = os.environ["RANK"]
    # Written only if the interpreter's own exit runs (atexit handlers): not under os._exit.
    atexit.register(lambda: open(f"{marker}.{rank}", "w").close())
    dist.init_process_group("gloo")
    # Every rank past its init before any destroys: without the guards' init barrier a rank
    # can destroy its group and leave while another is still connecting to it (seen once in
    # CI: "Connection closed by peer" in the other's init_process_group).
    dist.barrier()
    group = weakref.ref(dist.group.WORLD)
    dist.destroy_process_group()
    gc.collect()
    return {
        "init_barrier": os.environ.get("TORCH_DIST_INIT_BARRIER"),
        "initialized_after_destroy": dist.is_initialized(),
        "group_freed": group() is None,
    }


@pytest.mark.under_launcher("what it asserts is the launcher's own guards, on and off")
def test_the_guards_set_the_init_barrier_keep_destroyed_groups_and_skip_the_exit(
    tmp_path, monkeypatch
):
    # 01-28: with its guards (the default) every rank gets TORCH_DIST_INIT_BARRIER=1, a
    # destroyed group is forgotten (is_initialized() False) but never freed, and the rank
    # ends with os._exit (no atexit handler runs). guards=False: no variable, the group is
    # freed by destroy_process_group(), and the interpreter's exit runs, as under torchrun.
    monkeypatch.delenv("TORCH_DIST_INIT_BARRIER", raising=False)
    for guards, want in (
        (True, {"init_barrier": "1", "initialized_after_destroy": False, "group_freed": False}),
        (False, {"init_barrier": None, "initialized_after_destroy": False, "group_freed": True}),
    ):
        marker = tmp_path / f"exited-{guards}"
        assert list(launch(_what_the_rank_sees, str(marker), guards=guards, timeout=60)) == [
            want,
            want,
        ]
        ran_atexit = sorted(p.name for p in tmp_path.glob(f"{marker.name}.*"))
        assert ran_atexit == ([] if guards else [f"{marker.name}.0", f"{marker.name}.1"])


def _is_rank_zero_still_there() -> bool | None:
    import os
    import time

    import psutil
    import torch.distributed as dist

    dist.init_process_group("gloo")
    pids = [None, None]
    dist.all_gather_object(pids, os.getpid())
    dist.destroy_process_group()
    if os.environ["RANK"] == "0":
        return None  # returns at once
    until = time.monotonic() + 3.0
    while time.monotonic() < until:  # rank 0 has returned: has it exited too?
        try:
            if psutil.Process(pids[0]).status() == psutil.STATUS_ZOMBIE:
                return False
        except psutil.NoSuchProcess:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.under_launcher("what it asserts is the launcher's own guards, on and off")
def test_with_its_guards_rank_zero_leaves_last_without_them_as_soon_as_it_is_done():
    # 01-28: rank 0, which serves the store, exits only once every other rank has (with the
    # guards); guards=False, it exits as soon as it has returned, as under mp.spawn.
    assert launch(_is_rank_zero_still_there, timeout=60)[1] is True
    assert launch(_is_rank_zero_still_there, timeout=60, guards=False)[1] is False
