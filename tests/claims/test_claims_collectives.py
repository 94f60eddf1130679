"""Claims the lessons make about the process group and its collectives on gloo, and about
DistributedSampler, shown on the pinned torch (docs/claims.md names each claim's cell)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from claims_support import plain_job

from ddp_helpers import DistributedError, launch

# Tests under the course's launcher (`launch`) where its settings cannot change the result:
# they act at init (a store barrier) and at exit (kept groups, os._exit), not between.
UNDER_LAUNCHER = pytest.mark.under_launcher(
    "a collective's own check, a default or a wait between init and the end; "
    "the launcher acts at init (a barrier) and at exit"
)


def _average_on_gloo() -> list[float]:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    dist.destroy_process_group()
    return t.tolist()


@pytest.mark.under_launcher(
    "a collective's values; the launcher acts at init's end and at exit, and one OpenMP "
    "thread or the loopback interface change no value"
)
def test_gloo_averages_with_reduce_op_avg():
    # 02-14, 02-40: AVG works on gloo in the pinned torch (a sum, then a division), though
    # ReduceOp's docstring still says "only available with the NCCL backend".
    import torch.distributed as dist

    assert list(launch(_average_on_gloo, nprocs=3)) == [[2.0]] * 3
    assert "``AVG`` is only available with the ``NCCL`` backend" in dist.ReduceOp.__doc__


def _gather_unequal() -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    mine = torch.zeros(dist.get_rank() + 1)  # 1 value on rank 0, 2 on rank 1
    # Outputs sized as all_gather asks ("correctly-sized"): each rank's own size.
    dist.all_gather([torch.zeros(rank + 1) for rank in range(2)], mine)
    dist.destroy_process_group()


@UNDER_LAUNCHER
def test_all_gather_of_unequal_sizes_fails_on_gloo():
    # 04-50: on gloo all_gather takes one size on every rank, even into outputs of each
    # rank's size (nccl's takes other sizes through a broadcast path: a page row in
    # docs/claims.md).
    with pytest.raises(DistributedError, match="invalid tensor size"):
        launch(_gather_unequal, nprocs=2, timeout=10)


def _store_timeout(backend: str | None) -> float:
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    dist.init_process_group(backend) if backend else dist.init_process_group()
    seconds = c10d._get_default_store().timeout.total_seconds()
    dist.destroy_process_group()
    return seconds


@UNDER_LAUNCHER
def test_the_default_timeout_is_thirty_minutes_and_set_before_the_backend_is_chosen():
    # 02-23: 30 minutes by default; a bare init_process_group() gets it as "undefined"
    # before the backend is picked (nccl's 10 minutes: a source row, no NCCL here).
    from torch.distributed import Backend
    from torch.distributed.distributed_c10d import _get_default_timeout

    assert _get_default_timeout(Backend("undefined")) == timedelta(minutes=30)
    assert _get_default_timeout(Backend.GLOO) == timedelta(minutes=30)
    assert launch(_store_timeout, None, nprocs=2)[0] == 1800.0
    assert launch(_store_timeout, "gloo", nprocs=2)[0] == 1800.0


@pytest.mark.parametrize(
    "n, world, shares",
    [
        (10, 3, [[0, 3, 6, 9], [1, 4, 7, 0], [2, 5, 8, 1]]),
        (2, 5, [[0], [1], [0], [1], [0]]),
    ],
)
def test_the_sampler_pads_by_repeating_from_the_start_and_deals_like_cards(n, world, shares):
    # 01-14, 04-24d: unshuffled, rank r gets r, r + W, ... of the list padded to
    # ceil(n / W) * W by repeating it from its start.
    from torch.utils.data.distributed import DistributedSampler

    got = [list(DistributedSampler(range(n), world, r, shuffle=False)) for r in range(world)]
    assert got == shares


def test_the_sampler_shuffles_from_seed_plus_epoch():
    # 04-03: every rank draws the same order from seed + epoch; without set_epoch every
    # epoch repeats epoch 0's.
    import torch
    from torch.utils.data.distributed import DistributedSampler

    sampler = DistributedSampler(range(12), num_replicas=3, rank=1, seed=5)
    for epoch in (0, 2):
        sampler.set_epoch(epoch)
        order = torch.randperm(12, generator=torch.Generator().manual_seed(5 + epoch)).tolist()
        assert list(sampler) == order[1::3]
    again = DistributedSampler(range(12), num_replicas=3, rank=1, seed=5)
    assert list(again) == list(again)  # no set_epoch: the same order every epoch
    sampler.set_epoch(0)
    assert list(again) == list(sampler)


def _mismatched() -> str:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    if dist.get_rank() == 0:
        dist.barrier()  # the barrier inside rank 0's save branch
    else:
        dist.all_reduce(torch.ones(3))  # the next epoch's all-reduce
    return "moved on"


@UNDER_LAUNCHER
def test_a_barrier_met_by_another_ranks_all_reduce_waits_until_stopped(monkeypatch):
    # 04-62: without TORCH_DISTRIBUTED_DEBUG=DETAIL, ranks in different collectives wait
    # (until the group's timeout; launch stops them after 3 s here).
    monkeypatch.delenv("TORCH_DISTRIBUTED_DEBUG", raising=False)
    with pytest.raises(DistributedError) as caught:
        launch(_mismatched, nprocs=2, timeout=3)
    assert caught.value.kind == "timeout"


# Plain processes (no launcher: its TORCH_DIST_INIT_BARRIER is not set), on a store that
# waits for nobody (wait_for_workers=False): what holds rank 0 in init_process_group can
# only be gloo connecting to every peer. Rank 1 comes 2 s late; rank 0 exits 0 if its
# init took that long, 3 if it returned sooner.
GLOO_CONNECTS = """\
import os
import sys
import time
from datetime import timedelta

import torch.distributed as dist

os.environ.pop("TORCH_DIST_INIT_BARRIER", None)
rank = int(os.environ["RANK"])
store = dist.TCPStore(
    "127.0.0.1", int(os.environ["MASTER_PORT"]), 2, is_master=rank == 0,
    wait_for_workers=False, timeout=timedelta(seconds=30),
)
if rank == 1:
    time.sleep(2.0)
start = time.monotonic()
dist.init_process_group("gloo", store=store, rank=rank, world_size=2)
took = time.monotonic() - start
dist.barrier()
dist.destroy_process_group()
sys.exit(0 if rank == 1 or took >= 1.5 else 3)
"""


def test_gloo_connects_during_init_so_no_rank_leaves_before_every_rank_has_joined(tmp_path):
    # 02-30: under gloo, init_process_group() returns on no rank before all have come:
    # rank 0 waits there, on a store that does not wait, for the rank 2 s late.
    script = tmp_path / "gloo_connects.py"
    script.write_text(GLOO_CONNECTS)
    assert plain_job(script, limit=60) == "clean"


FORGETS = """\
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
assert t.item() == 2.0
"""
ABORT = "terminate called without an active exception"


@pytest.mark.one_sided("a clean exit of the job that never destroys its group")
def test_a_gloo_job_that_never_destroys_its_group_may_abort_at_exit_one_that_does_not(tmp_path):
    # d84bc519, 04-35: with its group never destroyed, a gloo rank either exits cleanly or
    # aborts as it exits, "terminate called without an active exception" (how often:
    # benchmarks/exit_without_destroy.py, a measured row); destroyed, it exits cleanly.
    # Plain processes, as under torchrun, no launcher between.
    forgets, destroys = tmp_path / "forgets.py", tmp_path / "destroys.py"
    forgets.write_text(FORGETS)
    destroys.write_text(FORGETS + "dist.destroy_process_group()\n")
    for _ in range(3):
        for rank_said in plain_job(forgets).split("; "):
            assert rank_said in ("clean", f"exit -6: {ABORT}"), rank_said
        assert plain_job(destroys) == "clean"


# Plain processes (the launcher sets GLOO_SOCKET_IFNAME itself where it is unset).
ON_THE_NAMED_INTERFACE = """\
import sys

import torch
import torch.distributed as dist

try:
    dist.init_process_group("gloo")
except RuntimeError as exc:
    said = str(exc)
    sys.exit("init: " + ("names nosuch0" if "Unable to find address for: nosuch0" in said
                         else said[-60:]))
t = torch.ones(1)
dist.all_reduce(t)
assert t.item() == 2.0
dist.destroy_process_group()
"""


def test_gloo_socket_ifname_names_the_network_interface_gloo_uses(tmp_path, monkeypatch):
    # 04-34: GLOO_SOCKET_IFNAME picks gloo's network interface: loopback works here, an
    # interface this machine lacks fails at init, naming it (NCCL_SOCKET_IFNAME: a page).
    script = tmp_path / "named.py"
    script.write_text(ON_THE_NAMED_INTERFACE)
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    assert plain_job(script, 2, limit=60) == "clean"
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "nosuch0")  # one rank: no peer left waiting
    assert plain_job(script, 1, limit=60) == "exit 1: init: names nosuch0"
