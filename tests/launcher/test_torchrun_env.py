"""What `torchrun` really gives each rank, next to what `launch` gives (lesson 01, docs/).

torchrun is run here for real (on this machine, over loopback), once as one machine with two
ranks and once as two simulated machines with two ranks each. The ranks get the same numbers
from both; every other difference is one the launcher makes on purpose (see
`ddp_helpers/launcher/plan.py` and docs/launcher.md). A torch that changes what torchrun sets
fails here, naming the variable.

torch's own stores (the agents') listen on every interface while torchrun runs, as torch binds
them; every connection made here goes to 127.0.0.1 or to this machine's own name.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from ddp_helpers import launch

# The numbers a rank uses: equal under torchrun and under launch.
SAME = (
    "RANK",
    "LOCAL_RANK",
    "GROUP_RANK",
    "ROLE_RANK",
    "ROLE_NAME",
    "LOCAL_WORLD_SIZE",
    "WORLD_SIZE",
    "GROUP_WORLD_SIZE",
    "ROLE_WORLD_SIZE",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING",
)
# Set by both, with values that differ on purpose; each is checked below.
DIFFERENT = (
    "MASTER_ADDR",  # torchrun: the first machine's address; launch: 127.0.0.1
    "MASTER_PORT",  # torchrun: a port its agent chose and serves; launch: its own socket
    "TORCHELASTIC_USE_AGENT_STORE",  # torchrun: True (the agent hosts); launch: False (rank 0)
    "TORCHELASTIC_RUN_ID",  # torchrun: --rdzv-id (a uuid under --standalone); launch: its own
    "OMP_NUM_THREADS",  # torchrun: 1; launch: the cores shared between the ranks
)
# Only torchrun: its agent's error files and signal handling (launch reports failures itself).
TORCHRUN_ONLY = {"TORCHELASTIC_ERROR_FILE", "TORCHELASTIC_SIGNALS_TO_HANDLE"}
# Only launch: loopback for gloo and nccl, quiet C++ logs, torch's barrier after init (rank
# 0 leaves last there), and the launcher's own settings.
LAUNCH_ONLY = {
    "GLOO_SOCKET_IFNAME",
    "NCCL_SOCKET_IFNAME",
    "TORCH_CPP_LOG_LEVEL",
    "TORCH_DIST_INIT_BARRIER",
    "DDP_HELPERS_BACKEND",
    "DDP_HELPERS_LANG",
    "MPLBACKEND",
    "PYTHONUNBUFFERED",
}
# Where a variable is unset, each launcher chooses its own value; unset them all first.
UNSET = (*SAME, *DIFFERENT, *TORCHRUN_ONLY, *LAUNCH_ONLY, "CUDA_VISIBLE_DEVICES")

# A rank under torchrun: its environment, the sockets its parent (torchrun's agent) listens on,
# and, where asked, what it listens on itself once the process group is up.
RANK_SCRIPT = """
import json, os, sys
import psutil

def listening(process):
    return [c.laddr.port for c in process.net_connections("tcp") if c.status == psutil.CONN_LISTEN]

env = dict(os.environ)
agent = psutil.Process().parent()
record = {"env": env, "agent": agent.pid, "agent_listens": listening(agent)}
if sys.argv[2] == "init":
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    record["listens"] = listening(psutil.Process())
    total = torch.tensor([1.0])
    dist.all_reduce(total)
    record["all_reduce"] = total.item()
    dist.destroy_process_group()
with open(os.path.join(sys.argv[1], env["RANK"] + ".json"), "w") as f:
    json.dump(record, f)
"""


def under_launch():
    """A rank under launch: its environment and the ports it listens on in a process group."""
    import torch.distributed as dist

    env = dict(os.environ)
    dist.init_process_group("gloo")
    me = psutil.Process()
    listens = [c.laddr.port for c in me.net_connections("tcp") if c.status == psutil.CONN_LISTEN]
    dist.destroy_process_group()
    return {"env": env, "listens": listens}


@pytest.fixture
def clean_env(monkeypatch):
    for name in UNSET:
        monkeypatch.delenv(name, raising=False)


def torchrun(tmp_path: Path, *node_args: list[str], init: bool = False) -> dict:
    """Runs one torchrun per list of arguments (a machine each), together; returns the agents'
    pids and each rank's record, by rank."""
    (tmp_path / "rank.py").write_text(RANK_SCRIPT)
    # TMPDIR: torchrun's log folders go under tmp_path, not /tmp.
    env = dict(os.environ, TMPDIR=str(tmp_path), GLOO_SOCKET_IFNAME="lo")
    agents = [
        subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", *args, "--nproc-per-node", "2"]
            + ["rank.py", str(tmp_path), "init" if init else "env"],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        for args in node_args
    ]
    try:
        logs = [agent.communicate(timeout=60)[0] for agent in agents]
    finally:
        for agent in agents:  # on a timeout or an error: nothing is left running
            if agent.poll() is None:
                os.killpg(agent.pid, signal.SIGKILL)
                agent.wait()
    for agent, log in zip(agents, logs, strict=True):
        assert agent.returncode == 0, log[-3000:]
    records = {int(p.stem): json.loads(p.read_text()) for p in tmp_path.glob("[0-9]*.json")}
    return {"agents": [a.pid for a in agents], "env": env, "ranks": records}


def added(rank_env: dict, parent_env: dict) -> dict:
    """What a launcher set in a rank's environment: the variables it did not inherit."""
    return {k: v for k, v in rank_env.items() if parent_env.get(k) != v}


def compare(torchrun_envs: list[dict], torchrun_parent: dict, launch_envs: list[dict]):
    """The same numbers; only the planned differences (checked by the caller)."""
    for rank, (ours, theirs) in enumerate(zip(launch_envs, torchrun_envs, strict=True)):
        for name in SAME:
            assert ours.get(name) == theirs.get(name), (
                f"rank {rank}: {name} is {theirs.get(name)!r} under torchrun but "
                f"{ours.get(name)!r} under launch: update plan.rank_environment"
            )
        theirs_added = set(added(theirs, torchrun_parent))
        ours_added = set(added(ours, os.environ)) - {"CUDA_VISIBLE_DEVICES"}  # GPUs per machine
        assert theirs_added - ours_added == TORCHRUN_ONLY, (
            f"torchrun now also sets {sorted(theirs_added - ours_added - TORCHRUN_ONLY)} and "
            f"no longer {sorted(TORCHRUN_ONLY - theirs_added)}: decide whether launch gives them "
            "too (plan.rank_environment), and say so in docs/launcher.md and lesson 01"
        )
        assert ours_added - theirs_added == LAUNCH_ONLY, (
            f"torchrun now sets {sorted(LAUNCH_ONLY - (ours_added - theirs_added))} too, or "
            f"launch sets {sorted(ours_added - theirs_added - LAUNCH_ONLY)} that torchrun does not"
        )
        assert theirs["OMP_NUM_THREADS"] == "1", "torchrun's OMP_NUM_THREADS for several ranks"
        per_rank = max(1, len(os.sched_getaffinity(0)) // len(launch_envs))
        assert ours["OMP_NUM_THREADS"] == str(per_rank), "launch shares the cores"
        assert ours["MASTER_ADDR"] == "127.0.0.1", "launch meets on loopback"
        assert ours["TORCHELASTIC_USE_AGENT_STORE"] == "False", "under launch rank 0 hosts"
        assert theirs["TORCHELASTIC_USE_AGENT_STORE"] == "True", (
            "torchrun's ranks no longer use the agent's store: rank 0 hosts it again, so "
            "lesson 01, docs/cluster.md and docs/launcher.md say too much"
        )
    for envs in (torchrun_envs, launch_envs):  # one store for the job: every rank meets there
        assert len({(e["MASTER_ADDR"], e["MASTER_PORT"]) for e in envs}) == 1


def test_torchrun_standalone_gives_the_ranks_what_launch_gives(tmp_path, clean_env):
    run = torchrun(tmp_path, ["--standalone"])
    ranks = [run["ranks"][r] for r in range(2)]
    ours = launch(under_launch, nprocs=2, timeout=60)
    compare([r["env"] for r in ranks], run["env"], [o["env"] for o in ours])

    port = int(ranks[0]["env"]["MASTER_PORT"])
    assert ranks[0]["agent"] == run["agents"][0]
    assert port in ranks[0]["agent_listens"], "torchrun's agent no longer serves MASTER_PORT"
    # The rendezvous of the agents (--rdzv-endpoint localhost:0) is another store, on its own port.
    assert len(ranks[0]["agent_listens"]) == 2
    # MASTER_ADDR: this machine's name (dynamic_rendezvous: local_addr or socket.getfqdn()).
    assert ranks[0]["env"]["MASTER_ADDR"] == socket.getfqdn()
    assert ranks[0]["env"]["TORCHELASTIC_RUN_ID"] != ours[0]["env"]["TORCHELASTIC_RUN_ID"]
    # Under launch, rank 0 serves the store on the launcher's socket; rank 1 does not.
    our_port = int(ours[0]["env"]["MASTER_PORT"])
    assert our_port in ours[0]["listens"] and our_port not in ours[1]["listens"]


def test_two_torchrun_machines_give_the_ranks_what_launch_gives_on_two(tmp_path, clean_env):
    with socket.socket() as s:  # a free port for the agents' rendezvous
        s.bind(("127.0.0.1", 0))
        rdzv_port = s.getsockname()[1]
    common = ["--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-id", "job17"]
    common += ["--rdzv-endpoint", f"127.0.0.1:{rdzv_port}", "--local-addr", "127.0.0.1"]
    # c10d numbers the machines itself (--node-rank is ignored); is_host says which agent
    # serves the rendezvous endpoint, as the machine named in --rdzv-endpoint would.
    run = torchrun(
        tmp_path,
        [*common, "--rdzv-conf", "is_host=1"],
        [*common, "--rdzv-conf", "is_host=0"],
        init=True,
    )
    ranks = [run["ranks"][r] for r in range(4)]
    ours = launch(under_launch, nprocs=4, nnodes=2, timeout=60)
    compare([r["env"] for r in ranks], run["env"], [o["env"] for o in ours])

    for rank, record in enumerate(ranks):
        env = record["env"]
        assert int(env["RANK"]) == 2 * int(env["GROUP_RANK"]) + int(env["LOCAL_RANK"])
        assert record["all_reduce"] == 4.0  # the process group works across both machines
        assert env["TORCHELASTIC_RUN_ID"] == "job17"
        assert env["MASTER_ADDR"] == "127.0.0.1"  # machine 0's --local-addr
        assert int(env["MASTER_PORT"]) not in record["listens"], (
            f"rank {rank} serves MASTER_PORT itself under torchrun: the agent no longer does"
        )
    port = int(ranks[0]["env"]["MASTER_PORT"])
    assert port != rdzv_port, "MASTER_PORT is the --rdzv-endpoint port"
    # The agent of machine 0 (GROUP_RANK 0, the parent of ranks 0 and 1) serves MASTER_PORT;
    # the endpoint's agent (is_host=1) serves the rendezvous port, whichever machine it became.
    first, second = ranks[0], ranks[2]
    assert port in first["agent_listens"] and port not in second["agent_listens"]
    endpoint_agent = first if first["agent"] == run["agents"][0] else second
    assert rdzv_port in endpoint_agent["agent_listens"]
