"""gloo's teardown deadlock (torch 2.13), reproduced without the launcher's fix and not with it.

`make teardown-soak` (or `.venv/bin/python benchmarks/gloo_teardown.py --runs 200`). Each
run launches 2 ranks that train a DDP model a few steps, destroy the process group and free
the model: the moment a gloo group is freed while gloo's worker still holds a finished work
that needs the GIL (see `KeepGroups` in ddp_helpers/torch_compat.py). A run that has not
returned within `--limit` seconds hung. Busy loops load the cores, as the deadlock needs: it
shows under load. The two settings alternate in blocks, each with its own launcher helper:
the fix turned off (`DDP_HELPERS_DISABLE=keep_groups`) and on. Fisher's exact test says
whether the difference could be chance. Only loopback addresses are used.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent)]

from soak import alternate, busy_loops, report, soak_arguments  # noqa: E402

SETTINGS = {"without the fix": "keep_groups", "groups kept until exit": ""}


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
    args = soak_arguments(__doc__.splitlines()[0], runs=200, limit=10.0, block=25, busy=3)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        with busy_loops(args.busy):
            results = alternate(
                SETTINGS, args.runs, args.block, lambda off, n: _block(off, n, args.limit)
            )
    finally:
        os.environ.pop("DDP_HELPERS_DISABLE", None)
        with contextlib.suppress(Exception):
            from ddp_helpers.launcher import client

            client.shutdown()
    report(results, "keeping the groups is no better")
    return 0


if __name__ == "__main__":
    sys.exit(main())
