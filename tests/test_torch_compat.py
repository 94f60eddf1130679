"""torch's internals in one place: each touchpoint's self-check, and a fallback that launches."""

from __future__ import annotations

import importlib

import pytest

from ddp_helpers import launch
from ddp_helpers.launcher import client, torch_compat


def test_every_touchpoint_is_usable_with_the_pinned_torch():
    import torch

    assert str(torch.__version__).split("+")[0] in torch_compat.KNOWN_GOOD
    assert torch_compat.check() == dict.fromkeys(torch_compat.TOUCHPOINTS)
    assert torch_compat.warnings(torch_compat.check()) == []


def test_a_missing_internal_fails_its_self_check_and_says_what_is_lost(monkeypatch):
    rendezvous = importlib.import_module("torch.distributed.rendezvous")
    monkeypatch.delattr(rendezvous, "_create_c10d_store")
    results = torch_compat.check()
    assert "has no such thing" in results["rendezvous_store"]
    (line,) = torch_compat.warnings(results)
    assert line.startswith("[ddp_helpers] warning: torch.distributed.rendezvous._create_c10d_store")
    assert "it listens on every interface" in line


def test_a_changed_signature_fails_its_self_check(monkeypatch):
    rendezvous = importlib.import_module("torch.distributed.rendezvous")
    monkeypatch.setattr(rendezvous, "_create_c10d_store", lambda host, port, timeout: None)
    assert "its arguments are (host, port, timeout)" in torch_compat.check()["rendezvous_store"]


def test_an_untested_torch_release_is_named(monkeypatch):
    import torch

    monkeypatch.setattr(torch, "__version__", "9.9.0")
    assert "torch 9.9.0 is not among the releases" in torch_compat.check()["peer_text"]


def test_torch_load_saying_something_else_for_a_missing_gpu_fails_its_self_check(monkeypatch):
    import torch.serialization

    def worded_otherwise(location, backend_name):
        raise RuntimeError(f"no {backend_name} device {location} here")

    monkeypatch.setattr(torch.serialization, "_validate_device", worded_otherwise)
    results = torch_compat.check()
    assert "says: RuntimeError: no cuda device cuda:99 here" in results["load_device_text"]
    (line,) = torch_compat.warnings(results)
    assert "lesson 04's load check shows torch's own error" in line


def test_the_missing_gpu_self_check_leaves_torch_cuda_as_it_was():
    import torch

    before = torch.cuda.is_available, torch.cuda.device_count
    assert torch_compat.check()["load_device_text"] is None
    assert (torch.cuda.is_available, torch.cuda.device_count) == before


def test_the_teardown_pause_is_checked_by_applying_it_and_then_undone(monkeypatch):
    import sys
    import time

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    destroy, interval = dist.destroy_process_group, sys.getswitchinterval()
    stash, sleep = torch._C._stash_obj_in_tls, time.sleep
    assert torch_compat.check()["teardown_pause"] is None
    assert dist.destroy_process_group is destroy and sys.getswitchinterval() == interval
    assert torch._C._stash_obj_in_tls is stash and time.sleep is sleep
    assert "__del__" not in DistributedDataParallel.__dict__
    monkeypatch.setattr(torch_compat, "pause_after_destroy", lambda: lambda: None)
    assert "it changes nothing" in torch_compat.check()["teardown_pause"]


def test_the_teardown_pause_waits_only_after_a_backward(monkeypatch):
    import time

    import torch
    import torch.distributed as dist

    slept = []
    monkeypatch.setattr(time, "sleep", slept.append)
    undo = torch_compat.pause_after_destroy()
    try:
        torch_compat._destroy_without_group(dist)
        assert torch_compat.GIL_HANDOVER_S not in slept  # no backward yet: no pause
        torch.ones(1, requires_grad=True).sum().backward()  # stashes, as DDP's backward does
        torch_compat._destroy_without_group(dist)
        assert torch_compat.GIL_HANDOVER_S in slept
    finally:
        undo()


def test_the_debug_level_is_checked_by_reading_it_back_and_then_restored(monkeypatch):
    import os

    import torch.distributed as dist

    monkeypatch.delenv("TORCH_DISTRIBUTED_DEBUG", raising=False)
    level = dist.get_debug_level()
    assert torch_compat.check()["debug_level"] is None
    assert dist.get_debug_level() == level and "TORCH_DISTRIBUTED_DEBUG" not in os.environ
    monkeypatch.setattr(dist, "set_debug_level_from_env", lambda: None)  # reads nothing
    assert "it changes nothing" in torch_compat.check()["debug_level"]


def test_the_zygote_warms_up_torch_dynamo_unless_its_touchpoint_is_off():
    results = torch_compat.check()
    assert "torch._dynamo" in torch_compat.warm_modules(results)
    results["dynamo_preload"] = torch_compat.MESSAGES["disabled"]
    assert torch_compat.warm_modules(results) == ()


def all_reduce_on_the_default_store():
    import os

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    t = torch.ones(1)
    dist.all_reduce(t)
    dist.destroy_process_group()
    return t.item(), os.environ["MASTER_PORT"]


@pytest.fixture
def fresh_zygote(monkeypatch):
    client.shutdown()
    yield
    client.shutdown()  # the next test gets a zygote with every touchpoint again


@pytest.mark.usefixtures("no_leftovers", "fresh_zygote")
def test_with_the_rendezvous_touchpoints_off_the_fallback_launches_and_warns_once(
    monkeypatch, capfd
):
    monkeypatch.setenv("DDP_HELPERS_DISABLE", "rendezvous_store,listen_fd,dynamo_preload")
    results = launch(all_reduce_on_the_default_store, nprocs=2)
    assert [total for total, _ in results] == [2.0, 2.0]
    err = capfd.readouterr().err
    assert err.count("[ddp_helpers] warning:") == 3
    assert "switched off by DDP_HELPERS_DISABLE" in err and "every interface" in err
    assert list(launch(lambda: "again", nprocs=2)) == ["again", "again"]
    assert "warning" not in capfd.readouterr().err  # said once per helper process


def test_torch_2_8s_gloo_banner_is_dropped_and_a_ranks_own_lines_are_kept():
    from ddp_helpers.launcher.output import OutputRouter

    shown = []
    router = OutputRouter(2, ordered=False, sink=lambda stream, text: shown.append(text))
    banner = (
        "[Gloo] Rank 1 is connected to 1 peer ranks. Expected number of connected peer ranks is : 1"
    )
    router.feed(1, "stdout", f"{banner}\nloss 0.25\n[Gloo] Rank 1 says more\n".encode())
    router.finish()
    assert shown == ["[rank 1] loss 0.25\n", "[rank 1] [Gloo] Rank 1 says more\n"]
