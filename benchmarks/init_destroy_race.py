"""init_process_group() then destroy_process_group() at once, with and without torch's
barrier after init.

`.venv/bin/python benchmarks/init_destroy_race.py --runs 200`. Each run launches 3 ranks
that create a gloo process group and destroy it with no collective between, which can
fail on a rank still connecting when a peer has already left ("connectFullMesh ...
closed by peer"), or on a rank still reading the store when rank 0, which serves it, has
left ("Broken pipe" in `_store_based_barrier`). Busy loops load the cores. The settings:
torch's default (`TORCH_DIST_INIT_BARRIER=0`) and torch's store barrier at the end of
init_process_group (`TORCH_DIST_INIT_BARRIER=1`); the launcher passes the kernel's value to
the ranks. They alternate in blocks; Fisher's exact test (one-sided) says whether the
barrier could be no better. Only loopback addresses are used.
"""

from __future__ import annotations

import os
import sys

from ddp_helpers.paths import ROOT  # the repository, as the package finds it

sys.path[:0] = [str(ROOT / "benchmarks")]

from soak import alternate, busy_loops, report, soak_arguments  # noqa: E402

SETTINGS = {"torch's default (no barrier)": "0", "barrier after init": "1"}


def init_then_destroy():
    import torch.distributed as dist

    dist.init_process_group("gloo")
    dist.destroy_process_group()
    return 0


def _block(barrier: str, runs: int, limit: float) -> list[str]:
    from ddp_helpers import DistributedError, launch

    os.environ["TORCH_DIST_INIT_BARRIER"] = barrier  # the launcher keeps what is set
    outcomes = []
    for _ in range(runs):
        try:
            launch(init_then_destroy, nprocs=3, timeout=limit)
            outcomes.append("clean")
        except DistributedError as err:
            outcomes.append("hung" if err.kind == "timeout" else "failed")
    return outcomes


def main() -> int:
    args = soak_arguments(__doc__.splitlines()[0], runs=200, limit=20.0, block=25, busy=3)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        with busy_loops(args.busy):
            results = alternate(
                SETTINGS, args.runs, args.block, lambda barrier, n: _block(barrier, n, args.limit)
            )
    finally:
        os.environ.pop("TORCH_DIST_INIT_BARRIER", None)
    report(results, "the barrier is no better")
    return 0


if __name__ == "__main__":
    sys.exit(main())
