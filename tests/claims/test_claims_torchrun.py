"""Claims the lessons make about torchrun (torch.distributed.run), shown by running it on
loopback with the pinned torch (docs/claims.md names each claim's cell)."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import textwrap

import pytest

# Each rank says what torchrun gave it, after the env:// rendezvous, in a JSON file.
RANK = textwrap.dedent(
    """\
    import json, os
    import psutil
    import torch.distributed as dist

    dist.init_process_group("gloo")
    port = int(os.environ["MASTER_PORT"])
    me = psutil.Process()
    connections = getattr(me, "net_connections", None) or me.connections  # psutil 5.9: the latter
    listens = any(
        c.laddr.port == port and c.status == psutil.CONN_LISTEN for c in connections("inet")
    )
    with open(f"rank-{dist.get_rank()}.json", "w") as f:  # a file each: outputs interleave
        json.dump({
        "rank": dist.get_rank(),
        "omp": os.environ.get("OMP_NUM_THREADS"),
        "agent_store": os.environ.get("TORCHELASTIC_USE_AGENT_STORE"),
        "port": port,
        "rank_serves_store": listens,
        }, f)
    dist.barrier()
    dist.destroy_process_group()
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(tmp_path, args: list[str], script: str = RANK, **env) -> subprocess.CompletedProcess:
    path = tmp_path / "rank.py"
    path.write_text(script)
    environ = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"} | env
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", *args, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=environ,
        cwd=tmp_path,
    )


def _ranks(run: subprocess.CompletedProcess, tmp_path) -> list[dict]:
    assert run.returncode == 0, run.stderr[-3000:]
    found = [json.loads(path.read_text()) for path in tmp_path.glob("rank-*.json")]
    for path in tmp_path.glob("rank-*.json"):
        path.unlink()
    return sorted(found, key=lambda r: r["rank"])


def test_static_rendezvous_the_agent_serves_master_port_and_omp_is_one(tmp_path):
    # 01-28, 02-36: torchrun's default rendezvous is static: the agent serves the store on
    # --master-addr:--master-port, and no rank does; with more than one rank per machine
    # (and OMP_NUM_THREADS unset) every rank gets OMP_NUM_THREADS=1.
    port = _free_port()
    args = ["--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", str(port)]
    ranks = _ranks(_torchrun(tmp_path, args), tmp_path)
    assert [r["port"] for r in ranks] == [port, port]
    assert [r["agent_store"] for r in ranks] == ["True", "True"]
    assert [r["rank_serves_store"] for r in ranks] == [False, False]
    assert [r["omp"] for r in ranks] == ["1", "1"]


def test_c10d_rendezvous_shares_its_store_unless_told_not_to(tmp_path):
    # 01-28, 02-36, 04-34: under c10d (--standalone) the agent's store is shared with the
    # ranks (rank 0 serves none); TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 turns that off, and
    # rank 0 serves the store. One rank per machine: OMP_NUM_THREADS left unset.
    shared = _ranks(_torchrun(tmp_path, ["--standalone", "--nproc-per-node", "2"]), tmp_path)
    assert [(r["agent_store"], r["rank_serves_store"]) for r in shared] == [("True", False)] * 2
    alone = _ranks(
        _torchrun(
            tmp_path,
            ["--standalone", "--nproc-per-node", "1"],
            TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1",
        ),
        tmp_path,
    )
    assert [(r["agent_store"], r["rank_serves_store"], r["omp"]) for r in alone] == [
        ("False", True, None)
    ]


def test_static_rendezvous_shares_its_store_whatever_the_variable_says(tmp_path):
    # 04-34: the variable acts under c10d only; under the static rendezvous (torchrun's
    # default) the agent's store is shared with the ranks all the same (rank 0 serves
    # none), the store its handler keeps for every start.
    port = _free_port()
    args = ["--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--master-port", str(port)]
    run = _torchrun(tmp_path, args, TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1")
    ranks = _ranks(run, tmp_path)
    assert [(r["agent_store"], r["rank_serves_store"], r["port"]) for r in ranks] == [
        ("True", False, port)
    ]


DDP_BUILT = textwrap.dedent(
    """\
    import os
    import sys
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    def main(rank=None, world=None, inside=False):
        if inside:  # set in the rank, after torch was imported
            os.environ["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
        if rank is not None:
            os.environ.update(RANK=str(rank), WORLD_SIZE=str(world))
        dist.init_process_group("gloo")
        sys.stdout.write(f"level {dist.get_debug_level().name}\\n")  # one write: whole
        sys.stdout.flush()
        DDP(torch.nn.Linear(2, 2))
        dist.destroy_process_group()
        sys.stdout.write("built\\n")
        sys.stdout.flush()

    if __name__ == "__main__":
        if os.environ.get("SPAWN"):
            import torch.multiprocessing as mp
            os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["SPAWN"])
            mp.spawn(main, args=(2, sys.argv[1:] == ["inside"]), nprocs=2)
        else:
            main()
    """
)


def _spawned(tmp_path, *args: str, **env) -> subprocess.CompletedProcess:
    (tmp_path / "spawned.py").write_text(DDP_BUILT)
    return subprocess.run(
        [sys.executable, "spawned.py", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=dict(os.environ, SPAWN=str(_free_port()), **env),
    )


def _ddp_built() -> str:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    DDP(torch.nn.Linear(2, 2))
    dist.destroy_process_group()
    return "built"


@pytest.mark.under_launcher(
    "the launcher is one of three starters it runs: torchrun and mp.spawn, with no "
    "launcher, show the same crash"
)
def test_detail_debug_crashes_ddp_wherever_it_is_set_before_torch_reads_it(tmp_path, monkeypatch):
    # 02-29: TORCH_DISTRIBUTED_DEBUG=DETAIL with a DDP model on gloo: SIGSEGV under torchrun,
    # torch.multiprocessing.spawn and the course's launcher alike, when the variable is set
    # before the rank starts; set in the rank after torch was imported, it is not read at
    # all (the debug level stays OFF), and nothing crashes.
    from ddp_helpers import DistributedError, launch

    detail = {"TORCH_DISTRIBUTED_DEBUG": "DETAIL"}
    monkeypatch.setenv("TORCH_DISTRIBUTED_DEBUG", "DETAIL")  # the ranks' environment
    with pytest.raises(DistributedError) as caught:
        launch(_ddp_built, nprocs=2, timeout=60)
    assert any(f.signal == "SIGSEGV" for f in caught.value.failures.values()), caught.value
    monkeypatch.delenv("TORCH_DISTRIBUTED_DEBUG")
    run = _torchrun(tmp_path, ["--standalone", "--nproc-per-node", "2"], DDP_BUILT, **detail)
    assert run.returncode != 0 and "SIGSEGV" in run.stderr, run.stderr[-2000:]
    run = _spawned(tmp_path, **detail)
    assert run.returncode != 0 and "SIGSEGV" in run.stderr, run.stderr[-2000:]
    run = _spawned(tmp_path, "inside")
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.count("level OFF") == 2 and run.stdout.count("built") == 2


FAILING = textwrap.dedent(
    """\
    import sys

    from torch.distributed.elastic.multiprocessing.errors import record


    def main():
        raise RuntimeError("the rank's own error, from its own line")


    if __name__ == "__main__":
        (record(main) if sys.argv[1:] == ["recorded"] else main)()
    """
)


def test_only_an_entry_point_decorated_with_record_hands_its_error_to_the_agent(tmp_path):
    # 01-28: torchrun names TORCHELASTIC_ERROR_FILE; an entry point decorated with @record
    # writes its traceback there and the agent prints it as the root cause; an undecorated
    # one reaches the agent as "error_file: <N/A>", without it.
    args = ["--standalone", "--nproc-per-node", "1"]
    bare = _torchrun(tmp_path, args, FAILING)
    path = tmp_path / "rank.py"
    recorded = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", *args, str(path), "recorded"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert bare.returncode != 0 and recorded.returncode != 0
    assert "error_file: <N/A>" in bare.stderr
    assert "error_file: <N/A>" not in recorded.stderr
    assert "the rank's own error, from its own line" in recorded.stderr.split("Root Cause")[-1]


ONE_RANK_DIES = textwrap.dedent(
    """\
    import os, time
    if os.environ["RANK"] == "1":
        time.sleep(1)
        os._exit(1)
    time.sleep(120)  # rank 0 would still be running, as if waiting in a collective
    """
)


def test_a_rank_that_exits_with_1_makes_torchrun_stop_the_others_and_exit_1_naming_it(tmp_path):
    # 05-54: torchrun's agent sees rank 1 exit with 1, stops rank 0 with SIGTERM (listed as
    # a failure, exit code -15) long before its 120 s, exits with 1 itself and puts rank 1
    # first in its ChildFailedError report, as the root cause.
    args = ["--standalone", "--nproc-per-node", "2", "--local-addr", "127.0.0.1"]
    run = _torchrun(tmp_path, args, script=ONE_RANK_DIES)
    assert run.returncode == 1
    assert "torch.distributed.elastic.multiprocessing.errors.ChildFailedError" in run.stderr
    failures, _, cause = run.stderr.partition("Root Cause (first observed failure):")
    assert re.search(r"rank\s+: 1 \(local_rank: 1\)\n\s+exitcode\s+: 1 ", cause), cause
    assert re.search(r"rank\s+: 0 \(local_rank: 0\)\n\s+exitcode\s+: -15 .*SIGTERM", failures)
