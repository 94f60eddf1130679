"""How long one 2-rank launch takes, for each way of launching, measured in one run.

The work on each rank is the same everywhere: init_process_group("gloo"), one all_reduce,
destroy_process_group. Run it with `make bench`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from ddp_helpers.paths import ROOT  # the repository, as the package finds it

WORK = """
import os
import torch
import torch.distributed as dist

def work(rank=None, world_size=None):
    if rank is not None:  # mp.spawn passes the rank; the others read the environment
        os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size))
    dist.init_process_group("gloo")
    t = torch.ones(1)
    dist.all_reduce(t)
    dist.destroy_process_group()
"""

MP_SPAWN = (
    WORK
    + """
import json, socket, sys, time
import torch.multiprocessing as mp

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

if __name__ == "__main__":
    times = []
    for _ in range(int(sys.argv[1])):
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
        t = time.perf_counter()
        mp.spawn(work, args=(2,), nprocs=2, join=True)
        times.append(time.perf_counter() - t)
    print(json.dumps(times))
"""
)

BARE_FORK = (
    WORK
    + """
import json, socket, sys, time
torch.set_num_threads(1)

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

times = []
for _ in range(int(sys.argv[1])):
    t = time.perf_counter()
    port, pids = free_port(), []
    for rank in range(2):
        pid = os.fork()
        if pid == 0:
            os.environ.update(RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                              MASTER_PORT=str(port))
            work()
            os._exit(0)
        pids.append(pid)
    for pid in pids:
        os.waitpid(pid, 0)
    times.append(time.perf_counter() - t)
print(json.dumps(times))
"""
)

ACCELERATE = (
    WORK
    + """
import json, sys, time
from accelerate import notebook_launcher

def acc_work():
    work()

times = []
for _ in range(int(sys.argv[1])):
    t = time.perf_counter()
    notebook_launcher(acc_work, num_processes=2)
    times.append(time.perf_counter() - t)
print(json.dumps(times))
"""
)

FIRST_LAUNCH_CELL = """
import time
_t0 = time.perf_counter()
from ddp_helpers import launch

def work():
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo")
    t = torch.ones(1)
    dist.all_reduce(t)
    dist.destroy_process_group()

launch(work, nprocs=2)
print("FIRST", time.perf_counter() - _t0)
"""


def _script_times(tmp: Path, name: str, source: str, runs: int) -> list[float]:
    path = tmp / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = subprocess.run(
        [sys.executable, str(path), str(runs)], capture_output=True, text=True, env=env, cwd=tmp
    )
    if out.returncode != 0:
        raise RuntimeError(f"{name} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _torchrun_times(tmp: Path, runs: int) -> list[float]:
    path = tmp / "torchrun_work.py"
    path.write_text(WORK + "\nwork()\n")
    torchrun = [sys.executable, "-m", "torch.distributed.run"]
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run(
            [*torchrun, "--standalone", "--nproc-per-node", "2", str(path)],
            check=True,
            capture_output=True,
            env=dict(os.environ, OMP_NUM_THREADS="1"),
            cwd=tmp,
        )
        times.append(time.perf_counter() - t)
    return times


def _warm_times(runs: int, pause: float = 0.0) -> list[float]:
    """Warm launches back to back (or `pause` s apart)."""
    from ddp_helpers import launch

    ns: dict = {}
    exec(WORK, ns)
    os.environ["OMP_NUM_THREADS"] = "1"
    launch(ns["work"], nprocs=2)  # the first launch starts the zygote
    times = []
    for _ in range(runs):
        time.sleep(pause)
        t = time.perf_counter()
        launch(ns["work"], nprocs=2)
        times.append(time.perf_counter() - t)
    return times


def _first_launch_times(runs: int) -> list[float]:
    """A fresh Jupyter kernel per run; the time from the cell's first line to its result."""
    from jupyter_client import KernelManager

    times = []
    for _ in range(runs):
        km = KernelManager(kernel_name="python3")
        km.start_kernel(cwd=str(ROOT), env=dict(os.environ, OMP_NUM_THREADS="1"))
        kc = km.client()
        kc.start_channels()
        try:
            kc.wait_for_ready(timeout=60)
            time.sleep(1.0)  # let the kernel finish starting, as a learner's would have
            msg_id = kc.execute(FIRST_LAUNCH_CELL)
            text = ""
            while True:
                msg = kc.get_iopub_msg(timeout=120)
                if msg["parent_header"].get("msg_id") != msg_id:
                    continue
                if msg["msg_type"] == "stream":
                    text += msg["content"]["text"]
                if msg["msg_type"] == "error":
                    raise RuntimeError("\n".join(msg["content"]["traceback"]))
                if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                    break
            times.append(float(text.split("FIRST")[1].split()[0]))
        finally:
            kc.stop_channels()
            km.shutdown_kernel(now=True)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="launches per fast method")
    parser.add_argument("--slow-runs", type=int, default=3, help="launches per slow method")
    args = parser.parse_args()

    rows: dict[str, list[float] | None] = {}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        print(f"2 ranks, gloo, on {os.cpu_count()} CPU cores; medians of repeated launches")
        rows["mp.spawn (script)"] = _script_times(tmp, "mp_spawn", MP_SPAWN, args.slow_runs)
        rows["torchrun (script)"] = _torchrun_times(tmp, args.slow_runs)
        if importlib.util.find_spec("accelerate"):
            rows["accelerate notebook_launcher (fork)"] = _script_times(
                tmp, "acc", ACCELERATE, args.runs
            )
        else:
            rows["accelerate notebook_launcher (fork)"] = None
        rows["bare os.fork (script)"] = _script_times(tmp, "bare_fork", BARE_FORK, args.runs)
        rows["ddp_helpers.launch, warm"] = _warm_times(args.runs)
        # Cells run a moment apart, as a learner runs them: the zygote idle in between.
        rows["ddp_helpers.launch, warm, 0.3 s apart"] = _warm_times(args.runs, pause=0.3)
        rows["ddp_helpers.launch, first in a fresh kernel"] = _first_launch_times(args.slow_runs)

    med = {k: statistics.median(v) for k, v in rows.items() if v}
    warm = med["ddp_helpers.launch, warm"]
    width = max(map(len, rows))
    print(f"\n{'method':<{width}}  {'median s':>9}  {'runs':>4}  {'x warm launch':>13}")
    for name, times in rows.items():
        if times is None:
            print(f"{name:<{width}}  {'(not installed)':>9}")
            continue
        print(f"{name:<{width}}  {med[name]:>9.3f}  {len(times):>4}  {med[name] / warm:>13.1f}")

    speedup = med["mp.spawn (script)"] / warm
    vs_fork = warm / med["bare os.fork (script)"]
    first = med["ddp_helpers.launch, first in a fresh kernel"]
    targets = [
        (f"warm launch {speedup:.0f}x faster than mp.spawn", speedup >= 20, "target >= 20x"),
        (f"warm launch {vs_fork:.2f}x bare fork", vs_fork <= 1.1, "target <= 1.1x"),
        (f"first launch in a fresh kernel {first:.2f} s", first < 1.5, "target < 1.5 s"),
    ]
    print()
    for text, ok, target in targets:
        print(f"{'MET ' if ok else 'MISS'}  {text} ({target})")
    shutil.rmtree(tmp, ignore_errors=True)
    from ddp_helpers import shutdown

    shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
