"""A torchrun restart of the exported lesson 04 script: the static rendezvous, and c10d with
and without a store per start.

`make restart-soak` (or `.venv/bin/python benchmarks/torchrun_restart.py --runs 10`). Each
run exports the solved lesson 04, starts it under `torchrun --nproc-per-node 2
--max-restarts 1` with `FAIL_AT_EPOCH=2` (rank 1 dies as epoch 2 begins, on the first
start only), and counts it clean when torchrun ends with 0 after the restart resumed from
the snapshot. The three settings alternate run by run, so that load falls on all alike:
c10d (`--standalone`) with torch's default (the agent's store shared with the ranks and
kept across restarts); c10d with `TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1` (a new store each
start); and the static rendezvous, torchrun's default without `--standalone` or
`--rdzv-backend` (`--master-addr 127.0.0.1 --master-port P`), whose agent keeps one store
for every start and which no variable changes. Fisher's exact test says whether each
differs from the first by chance. Only loopback addresses are used.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil

from ddp_helpers.paths import ROOT  # the repository, as the package finds it

sys.path[:0] = [str(Path(__file__).resolve().parent)]

from soak import alternate, report, soak_arguments  # noqa: E402

STATIC = ("--master-addr", "127.0.0.1", "--master-port")  # and a free port, per run
SETTINGS = {
    "c10d, shared store (torch's default)": (("--standalone",), {}),
    "c10d, a store per start": (("--standalone",), {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}),
    "static rendezvous (no --standalone)": (STATIC, {}),
}


def _free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def one_run(script: Path, setting: tuple, limit: float) -> str:
    """'clean', or what went wrong, for one job that loses a rank and is restarted."""
    for leftover in script.parent.glob("checkpoint.pt*"):
        leftover.unlink()
    rendezvous, env = setting
    if rendezvous == STATIC:
        rendezvous = (*STATIC, _free_port())
    command = [sys.executable, "-m", "torch.distributed.run", *rendezvous]
    command += ["--nproc-per-node", "2", "--max-restarts", "1", script.name]
    full_env = dict(os.environ, OMP_NUM_THREADS="1", FAIL_AT_EPOCH="2", **env)
    proc = subprocess.Popen(
        command,
        cwd=script.parent,
        env=full_env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        # torchrun starts each rank in a session of its own: stop the whole tree.
        family = [proc.pid] + [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
        for pid in family:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.communicate()
        return f"still running after {limit:.0f} s"
    if proc.returncode == 0 and "resuming from checkpoint.pt at epoch 2" in out:
        return "clean"
    if "connectFullMesh" in err:
        return "the restart could not connect (connectFullMesh)"
    return f"torchrun ended with {proc.returncode}"


def main() -> int:
    args = soak_arguments(
        __doc__.splitlines()[0], runs=10, limit=60.0, limit_help="seconds a run may take"
    )
    from ddp_helpers.authoring.export import export

    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "train.py"
        export(str(ROOT / "solutions" / "04_sampler_and_checkpoint.ipynb"), str(script))
        results = alternate(  # run by run, so that load falls on both alike
            SETTINGS,
            args.runs,
            1,
            lambda setting, n: [one_run(script, setting, args.limit) for _ in range(n)],
        )
    report(results, "a store per start is no better")
    return 0


if __name__ == "__main__":
    sys.exit(main())
