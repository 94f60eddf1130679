"""Faults end to end: each way a rank can fail, where it can fail, and what the cell sees.

Which rank is blamed, and the words, are tested as logic in test_failures.py; here real
ranks fail in each way (raise, exit, SIGKILL, hang) at each place (before the process
group exists, inside a collective, after it is gone), first or last of three ranks.
"""

from __future__ import annotations

import itertools
import os
import socket
import sys
import time

import cloudpickle
import psutil
import pytest

from ddp_helpers import DistributedError, launch, spawn
from ddp_helpers.procs import with_this_package
from support import SOON

# The ranks get `faulty` by value: importing this module (and pytest) in each of them took
# seconds of a hang case's short limit on a slow machine, and the hang was not reached.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

NPROCS = 3
FAULTS = ("raise", "exit", "sigkill", "hang")
WHERE = ("before_init", "in_collective", "after_destroy")
HANG_TIMEOUT = 3.0  # time to start 3 ranks and reach the hang, on a loaded 2-core machine


def faulty(fault, bad_rank, where):
    import datetime
    import signal

    import torch
    import torch.distributed as dist

    rank = int(os.environ["RANK"])

    def fail():
        if fault == "raise":
            raise RuntimeError(f"injected fault on rank {rank}")
        if fault == "exit":
            os._exit(7)
        if fault == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(600)  # hang

    if where == "before_init" and rank == bad_rank:
        fail()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    t = torch.ones(1)
    if where == "in_collective" and rank == bad_rank:
        fail()
    dist.all_reduce(t)  # the other ranks are waiting in here for the bad one
    dist.destroy_process_group()
    if where == "after_destroy" and rank == bad_rank:
        fail()
    return rank


# The whole matrix, which `make soak` runs again and again (benchmarks/fault_soak.py).
FULL_MATRIX = list(itertools.product(FAULTS, (0, NPROCS - 1), WHERE))
# What a test run needs of it: every fault and every place, first or last rank: 8 runs.
CASES = [
    ("raise", 0, "in_collective"),
    ("raise", NPROCS - 1, "before_init"),
    ("exit", NPROCS - 1, "in_collective"),
    ("exit", 0, "after_destroy"),
    ("sigkill", 0, "before_init"),
    ("sigkill", NPROCS - 1, "in_collective"),
    ("hang", NPROCS - 1, "in_collective"),
    ("hang", 0, "after_destroy"),
]
assert {c[0] for c in CASES} == set(FAULTS) and {c[2] for c in CASES} == set(WHERE)


def run_case(fault, bad_rank, where):
    """Run one case; return (the error, seconds taken)."""
    timeout = HANG_TIMEOUT if fault == "hang" else 60
    t0 = time.monotonic()
    with pytest.raises(DistributedError) as info:
        launch(faulty, fault, bad_rank, where, nprocs=NPROCS, timeout=timeout)
    return info.value, time.monotonic() - t0


def check_case(fault, bad_rank, where, err, elapsed):
    if fault == "hang":
        assert err.kind == "timeout"
        assert HANG_TIMEOUT <= elapsed < HANG_TIMEOUT + SOON, elapsed
        assert "time.sleep(600)  # hang" in err.stacks[bad_rank]
        if where == "after_destroy":
            for rank in set(range(NPROCS)) - {bad_rank}:
                assert f"rank {rank}: had already finished" in err.render()
        else:
            for rank in set(range(NPROCS)) - {bad_rank}:
                expected = "init_process_group" if where == "before_init" else "all_reduce"
                assert expected in err.stacks[rank], err.stacks[rank]
        return
    assert elapsed < SOON, f"took {elapsed:.1f} s"
    assert err.rank == bad_rank, err.render()
    if fault == "raise":
        assert err.kind == "exception" and err.exc_type == "RuntimeError"
        assert f"injected fault on rank {bad_rank}" in err.render()
        assert 'raise RuntimeError(f"injected fault on rank {rank}")' in err.render()
    elif fault == "exit":
        assert err.kind == "exit" and err.exitcode == 7
        assert f"rank {bad_rank} exited with code 7" in err.render()
    else:
        assert err.kind == "signal" and err.signal_name == "SIGKILL"
        assert f"rank {bad_rank} was killed by SIGKILL" in err.render()


@pytest.mark.parametrize(
    ("fault", "bad_rank", "where"), CASES, ids=[f"{f}-rank{r}-{w}" for f, r, w in CASES]
)
def test_fault_matrix(fault, bad_rank, where):
    err, elapsed = run_case(fault, bad_rank, where)
    check_case(fault, bad_rank, where, err, elapsed)
    assert list(launch(lambda: "fine", nprocs=2)) == ["fine", "fine"]  # the next one works


def listening_sockets():
    import datetime

    import torch.distributed as dist

    from ddp_helpers import procs

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
    dist.barrier()
    mine = procs.listening_sockets()
    dist.barrier()
    dist.destroy_process_group()
    return mine


def test_every_socket_a_run_listens_on_is_on_loopback():
    per_rank = launch(listening_sockets, nprocs=3)
    assert per_rank[0], "rank 0 serves the store: it must listen somewhere"
    for rank, sockets in enumerate(per_rank):
        for ip, port in sockets:
            assert ip in ("127.0.0.1", "::1", "::ffff:127.0.0.1"), (rank, ip, port)


def tutorial_on_port(rank, world_size, port, folder):
    import json

    import torch
    import torch.distributed as dist

    from ddp_helpers import procs

    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    t = torch.ones(1)
    dist.all_reduce(t)
    listening = [p for _, p in procs.listening_sockets()]  # rank 0's: the store's port
    dist.barrier()
    dist.destroy_process_group()
    seen = {"total": t.item(), "port": int(os.environ["MASTER_PORT"]), "listening": listening}
    (folder / f"{rank}.json").write_text(json.dumps(seen))


def test_a_port_held_by_another_program_is_never_used(tmp_path):
    import json

    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    held = holder.getsockname()[1]
    try:
        # The code asks for the held port itself; the launcher's own socket is used instead.
        spawn(tutorial_on_port, args=(2, held, tmp_path), nprocs=2, timeout=60)
    finally:
        holder.close()
    seen = [json.loads((tmp_path / f"{rank}.json").read_text()) for rank in range(2)]
    assert [s["total"] for s in seen] == [2.0, 2.0]
    port = seen[0]["port"]
    assert port != held and seen[1]["port"] == port  # both ranks met on the launcher's port
    assert port in seen[0]["listening"] and held not in seen[0]["listening"]


CONCURRENT = """
import sys
from ddp_helpers import launch

def work():
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    t = torch.ones(1)
    dist.all_reduce(t)
    dist.destroy_process_group()
    return t.item()

for _ in range(int(sys.argv[1])):
    assert list(launch(work, nprocs=2, timeout=60)) == [2.0, 2.0]
print("ok")
"""


def test_two_kernels_launching_at_the_same_moment_never_collide(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "concurrent.py"
    script.write_text(CONCURRENT)
    env = with_this_package(dict(os.environ, OMP_NUM_THREADS="1"))
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), "8"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(2)
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0 and out.strip() == "ok", err[-2000:]


def test_far_more_ranks_than_cores_warns(capsys, monkeypatch):
    # Two cores, faked: on a 64-core machine 4 x cores + 1 would be 257 real ranks.
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    launch(lambda: None, nprocs=9)
    err = capsys.readouterr().err
    assert "warning: 9 ranks on 2 CPU cores" in err


def test_seventy_ranks_start_and_return():
    # Four pipes per rank: 281 descriptors, more than one socket message can carry.
    results = launch(os.getpid, nprocs=70, timeout=60)  # raises if they are not back by then
    assert len(set(results)) == 70


def test_a_rank_that_cannot_be_forked_is_named_and_the_launcher_lives_on(monkeypatch):
    from ddp_helpers.launcher import client

    # A zygote whose fork of rank 10 fails with EAGAIN (Zygote's fork_fails_at), as under
    # RLIMIT_NPROC: ranks 0-9, already started, must be stopped.
    zygote = client.ZygoteClient(fork_fails_at=10)
    try:
        monkeypatch.setattr(client, "_zygote", zygote)
        launch(lambda: None, nprocs=2)
        assert client.running() is zygote
        start = time.monotonic()
        with pytest.raises(DistributedError) as info:
            launch(time.sleep, 60, nprocs=12, timeout=30)
        assert time.monotonic() - start < SOON  # not the 30 s timeout: the failed fork
        err = info.value
        assert err.kind == "start" and err.rank == 10
        assert "Rank 10 of 12 could not be started" in str(err)
        assert "Resource temporarily unavailable" in str(err)
        assert "helper process died" not in str(err)
        left = [p.name() for p in psutil.Process(zygote.proc.pid).children()]
        assert left == [], left
        assert client.running() is zygote  # the same, healthy zygote
        assert sorted(launch(lambda: os.environ["RANK"], nprocs=2)) == ["0", "1"]
        assert client.running() is zygote
    finally:
        zygote.close()


def save_twice_dying_in_the_second(path):
    import signal

    import torch
    import torch.distributed as dist

    from ddp_helpers.exercises.lesson04.save import _trained_ddp, save_checkpoint

    dist.init_process_group("gloo")
    model, opt = _trained_ddp()
    save_checkpoint(model, opt, 1, path)
    if dist.get_rank() == 0:
        real_save = torch.save

        def save_then_die(obj, f, *args, **kwargs):
            real_save(obj, f, *args, **kwargs)
            with open(f, "r+b") as handle:  # as if the machine died halfway through
                handle.truncate(os.path.getsize(f) // 2)
            os.kill(os.getpid(), signal.SIGKILL)

        torch.save = save_then_die
    save_checkpoint(model, opt, 2, path)


def test_a_rank_killed_mid_save_leaves_the_previous_checkpoint_loadable(tmp_path):
    import torch

    path = tmp_path / "ckpt.pt"  # a pathlib.Path: the reference takes one as well as a str
    with pytest.raises(DistributedError) as info:
        launch(save_twice_dying_in_the_second, path, nprocs=2, timeout=60)
    assert info.value.rank == 0 and info.value.signal_name == "SIGKILL"
    checkpoint = torch.load(path, map_location="cpu")
    assert checkpoint["epoch"] == 1 and "model" in checkpoint


def crash_at_exit():
    import os as os_module

    # The worker ends a rank with os._exit after sending its result; make that exit an
    # abort, as gloo sometimes does at interpreter exit.
    os_module._exit = lambda code: os_module.abort()
    return int(os_module.environ["RANK"]) * 10


def test_a_crash_at_exit_after_the_result_keeps_the_result_with_one_warning(capsys):
    results = launch(crash_at_exit, nprocs=2)
    assert list(results) == [0, 10]
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warnings) == 2  # one line per rank that crashed
    assert warnings[0].startswith("[ddp_helpers] warning: rank 0 was killed by SIGABRT at exit")
    assert "the result is kept" in warnings[0]
