"""The test SLURM cluster (cluster/slurm.py) runs jobs as a real two-node one would.

What later tests of multi-node launches rely on: a batch job's tasks spread over both nodes,
torchrun started by srun on each node joining one process group across them, and a job
requeued running again.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import sys
import textwrap
from collections import Counter
from pathlib import Path

# The fixture `slurm_cluster` comes from tests/conftest.py: imported here as well, it
# would be a second one, and a second cluster started in the same session.
from cluster.slurm import Cluster

# Bounds on each job, as SLURM sees it (--time, minutes) and as the test waits for it (s):
# seconds of work, with room for a loaded 2-core machine (torch imported by 6 processes).
JOB_MINUTES = "3"
SHORT_JOB = 60.0
TORCH_JOB = 150.0


def batch_script(cluster: Cluster, name: str, body: str) -> Path:
    """A batch script in the cluster's shared folder, where every node can read it."""
    path = cluster.folder / f"{name}.sh"
    path.write_text("#!/bin/bash\nset -eu\n" + textwrap.dedent(body))
    return path


def test_a_job_runs_two_tasks_on_each_of_two_nodes(slurm_cluster):
    c = slurm_cluster
    script = batch_script(
        c,
        "tasks",
        """\
        srun bash -c 'echo "task $SLURMD_NODENAME $SLURM_PROCID $SLURM_NTASKS $SLURM_LOCALID"'
        """,
    )
    job = c.submit(script, "--nodes=2", "--ntasks-per-node=2", f"--time={JOB_MINUTES}")
    assert c.wait(job, SHORT_JOB) == "COMPLETED", c.output(job)
    tasks = [line.split()[1:] for line in c.output(job).splitlines() if line.startswith("task ")]
    assert sorted(int(rank) for _, rank, _, _ in tasks) == [0, 1, 2, 3], c.output(job)
    assert {n for _, _, n, _ in tasks} == {"4"}
    assert Counter(node for node, *_ in tasks) == {"n1": 2, "n2": 2}
    # Within a node, local ids 0 and 1.
    for node in c.nodes:
        assert sorted(local for n, _, _, local in tasks if n == node) == ["0", "1"]
    assert all(ipaddress.ip_address(c.address(node)).is_loopback for node in c.nodes)


def test_torchrun_on_each_node_joins_one_process_group_of_four(slurm_cluster):
    c = slurm_cluster
    worker = c.folder / "all_reduce.py"
    worker.write_text(
        textwrap.dedent(
            """\
            import os

            import torch
            import torch.distributed as dist

            dist.init_process_group("gloo")
            ones = torch.ones(1)
            dist.all_reduce(ones)
            line = (
                f"rank {dist.get_rank()} world {dist.get_world_size()} sum {int(ones.item())}"
                f" node {os.environ['SLURMD_NODENAME']}\\n"
            )
            # In one write: the node's two workers share torchrun's output (print, unbuffered
            # under torchrun, writes the line and its end apart, and lines came out mixed).
            os.write(1, line.encode())
            dist.destroy_process_group()
            """
        )
    )
    with socket.socket() as s:  # a free port for the rendezvous, on loopback
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # One torchrun a node (srun: one task a node), two workers each; the rendezvous on
    # loopback, and gloo on it too (it would take the interface of the machine's name).
    script = batch_script(
        c,
        "torchrun",
        f"""\
        export GLOO_SOCKET_IFNAME=lo OMP_NUM_THREADS=1
        srun --ntasks-per-node=1 {sys.executable} -m torch.distributed.run \\
            --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d \\
            --rdzv-endpoint 127.0.0.1:{port} --rdzv-id "$SLURM_JOB_ID" \\
            --local-addr 127.0.0.1 {worker}
        """,
    )
    job = c.submit(script, "--nodes=2", "--ntasks-per-node=1", f"--time={JOB_MINUTES}")
    assert c.wait(job, TORCH_JOB) == "COMPLETED", c.output(job)
    ranks = re.findall(r"rank (\d) world (\d+) sum (\d+) node (\w+)", c.output(job))
    assert sorted(rank for rank, *_ in ranks) == ["0", "1", "2", "3"], c.output(job)
    assert {(world, total) for _, world, total, _ in ranks} == {("4", "4")}, c.output(job)
    assert Counter(node for *_, node in ranks) == {"n1": 2, "n2": 2}, c.output(job)


def test_a_requeued_job_runs_again_and_knows_it(slurm_cluster):
    # As a job preempted, or one that asks for it before its time is up: back in the queue,
    # then run again from the start, SLURM_RESTART_COUNT telling it which time this is.
    c = slurm_cluster
    script = batch_script(
        c,
        "requeue",
        """\
        echo "run ${SLURM_RESTART_COUNT:-0}"
        if [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then
            scontrol requeue "$SLURM_JOB_ID"
            sleep 60
        fi
        """,
    )
    job = c.submit(script, "--requeue", "--open-mode=append", f"--time={JOB_MINUTES}")
    # The second run waits out cred_expire (10 s, see slurm.py) after the first.
    assert c.wait(job, SHORT_JOB) == "COMPLETED", c.output(job)
    assert c.output(job).count("run ") == 2 and "run 1" in c.output(job), c.output(job)
    assert c.job(job)["Restarts"] == "1"
