"""What the claims' tests share (and benchmarks/exit_without_destroy.py): a comparison run
inside ranks, and a job of plain processes with no launcher between."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

# A claims job's rank records what it finds, fact by fact, into OUT.<rank> as JSON (keep), and
# what a call raised as text (said). A job script defines OUT and imports json and os first.
RANK_RECORDS = """
rank, W = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
found = {}


def keep(name, value):
    found[name] = value
    with open(f"{OUT}.{rank}", "w") as f:
        json.dump(found, f)


def said(call):
    try:
        call()
        return "ran"
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
"""


def same_on_every_rank(tensor) -> bool:
    """Whether every rank of the default group holds a tensor equal to this one."""
    import torch
    import torch.distributed as dist

    gathered = [torch.zeros_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, tensor.detach().contiguous())
    return all(torch.equal(gathered[0], other) for other in gathered[1:])


def plain_job(script: Path, nprocs: int = 2, limit: float = 60.0, args: tuple = ()) -> str:
    """Runs `script` as `nprocs` plain processes joined on loopback (RANK, WORLD_SIZE,
    MASTER_ADDR and MASTER_PORT set, as torchrun would): 'clean' when every one exits with
    0 and writes nothing on stderr, otherwise each bad rank's exit status and last stderr
    line ("hung" past `limit` seconds)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    env.update(WORLD_SIZE=str(nprocs), OMP_NUM_THREADS="1")
    env.pop("TORCH_DISTRIBUTED_DEBUG", None)
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), *args],
            env={**env, "RANK": str(rank)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(nprocs)
    ]
    outcomes = []
    try:
        for proc in procs:
            try:
                _, err = proc.communicate(timeout=limit)
            except subprocess.TimeoutExpired:
                outcomes.append("hung")
                continue
            if proc.returncode or err.strip():
                last = err.strip().splitlines()[-1] if err.strip() else ""
                outcomes.append(f"exit {proc.returncode}: {last[:80]}")
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    return "; ".join(outcomes) or "clean"
