"""gloo's teardown deadlock (torch 2.13), reproduced without the launcher's fix and not with it.

`make teardown-soak` (or `.venv/bin/python benchmarks/gloo_teardown.py --runs 200`). Each
run launches 2 ranks that train a DDP model a few steps, destroy the process group and
free the model: the moment a gloo group is freed while gloo's worker still holds a
finished work that needs the GIL (see `keep_groups_until_exit` in
ddp_helpers/launcher/torch_compat.py). A run that has not returned within `--limit`
seconds hung. Busy loops load the cores, as the deadlock needs: it shows under load. The
two settings alternate in blocks, each with its own launcher helper: the fix turned off
(`DDP_HELPERS_DISABLE=keep_groups`) and on. Fisher's exact test says whether the
difference could be chance. Only loopback addresses are used.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SETTINGS = {"without the fix": "keep_groups", "groups kept until exit": ""}
BUSY = "while True: pass"


def fisher_one_sided(hangs_a: int, runs_a: int, hangs_b: int, runs_b: int) -> float:
    """P(b has at most hangs_b hangs | the margins), if both settings were alike."""
    hangs, total = hangs_a + hangs_b, runs_a + runs_b
    return sum(
        math.comb(runs_b, k) * math.comb(runs_a, hangs - k)
        for k in range(max(0, hangs - runs_a), min(hangs_b, hangs) + 1)
    ) / math.comb(total, hangs)


def train_destroy_free():
    """One rank: DDP steps (gloo works that captured backward's stash), destroy, free."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    model = DDP(torch.nn.Linear(64, 64))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        optimizer.zero_grad()
        model(torch.randn(16, 64)).sum().backward()
        optimizer.step()
    dist.destroy_process_group()
    del model, optimizer  # the last reference to the group, unless it is kept
    return 0


def _block(disabled: str, runs: int, limit: float) -> list[str]:
    from ddp_helpers import DistributedError, launch
    from ddp_helpers.launcher import client

    client.shutdown()  # a new helper reads the setting
    os.environ["DDP_HELPERS_DISABLE"] = disabled
    outcomes = []
    for _ in range(runs):
        try:
            launch(train_destroy_free, nprocs=2, timeout=limit)
            outcomes.append("clean")
        except DistributedError as err:
            outcomes.append("hung" if err.kind == "timeout" else f"failed: {err.kind}")
    return outcomes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="runs of each setting")
    parser.add_argument("--block", type=int, default=25, help="runs before switching")
    parser.add_argument("--busy", type=int, default=3, help="busy loops beside the ranks")
    parser.add_argument("--limit", type=float, default=10.0, help="seconds before 'hung'")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(args.busy)]
    results: dict[str, list[str]] = {name: [] for name in SETTINGS}
    started = time.monotonic()
    try:
        while any(len(r) < args.runs for r in results.values()):
            for name, disabled in SETTINGS.items():
                n = min(args.block, args.runs - len(results[name]))
                results[name] += _block(disabled, n, args.limit)
            line = ", ".join(f"{n}: {r.count('hung')} hung of {len(r)}" for n, r in results.items())
            print(f"[{time.monotonic() - started:5.0f} s] {line}", flush=True)
    finally:
        for proc in busy:
            proc.kill()
        os.environ.pop("DDP_HELPERS_DISABLE", None)
        with contextlib.suppress(Exception):
            from ddp_helpers.launcher import client

            client.shutdown()
    print()
    for name, outcomes in results.items():
        print(f"{name:24} {outcomes.count('hung'):4d} hung of {len(outcomes)}")
        for why in sorted(set(outcomes) - {"clean", "hung"}):
            print(f"{'':24} {outcomes.count(why):4d} x {why}")
    (without, kept) = results.values()
    p = fisher_one_sided(without.count("hung"), len(without), kept.count("hung"), len(kept))
    print(f"Fisher's exact test, one-sided: p = {p:.2g} that keeping the groups is no better")
    return 0


if __name__ == "__main__":
    sys.exit(main())
