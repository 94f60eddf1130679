"""A gloo job that exits without destroy_process_group(), against one that calls it.

`make exit-soak` (or `.venv/bin/python benchmarks/exit_without_destroy.py --runs 40`). Each
run starts 2 plain processes (no launcher between: what `python train.py` under torchrun
does at exit) that join a gloo group on loopback, all-reduce one tensor and exit, with or
without `dist.destroy_process_group()` before. A run is clean when both exit with 0 and
print nothing on stderr; otherwise the outcome names the exit status and the last line a
rank wrote. The two settings alternate in blocks. Fisher's exact test says whether the
difference could be chance. Only loopback addresses are used.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests" / "claims")]

from claims_support import plain_job  # noqa: E402
from soak import alternate, report, soak_arguments  # noqa: E402

RANK = """\
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
if {destroy}:
    dist.destroy_process_group()
"""
SETTINGS = {"without destroy_process_group()": False, "with it": True}


def _block(destroy: bool, runs: int, limit: float, folder: Path) -> list[str]:
    script = folder / f"rank_{'destroys' if destroy else 'forgets'}.py"
    script.write_text(RANK.format(destroy=destroy))
    return [plain_job(script, 2, limit) for _ in range(runs)]


def main() -> int:
    args = soak_arguments(__doc__.splitlines()[0], runs=40, limit=60.0, block=10)
    with tempfile.TemporaryDirectory(prefix="exit-soak-") as tmp:
        results = alternate(
            SETTINGS, args.runs, args.block, lambda d, n: _block(d, n, args.limit, Path(tmp))
        )
    report(results, "calling destroy_process_group() is no better")
    return 0


if __name__ == "__main__":
    sys.exit(main())
