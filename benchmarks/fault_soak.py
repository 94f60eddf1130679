"""Run the launcher's fault matrix many times and print any case that ever misbehaves.

`make soak` (or `.venv/bin/python benchmarks/fault_soak.py --rounds 20`). Each round runs
every case of tests/launcher/test_faults.py (a rank that raises, exits, is SIGKILLed or hangs;
first or last rank; before init, inside a collective, after destroy) and checks the same
things the test does: the right rank and cause, in time, nothing left running.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter

from ddp_helpers.paths import ROOT  # the repository, as the package finds it

sys.path[:0] = [str(ROOT / "tests")]


def _leftovers() -> list:
    import psutil

    from ddp_helpers.launcher import client

    zygote = client.running()
    if zygote is None:
        return []
    kids = psutil.Process(zygote.proc.pid).children(recursive=True)
    return [p for p in kids if p.is_running() and p.status() != "zombie"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")

    from test_faults import FULL_MATRIX as CASES
    from test_faults import check_case, run_case

    from ddp_helpers import launch, shutdown

    failures: Counter = Counter()
    started = time.monotonic()
    for round_ in range(1, args.rounds + 1):
        for case in CASES:
            name = "-".join(map(str, case))
            try:
                err, elapsed = run_case(*case)
                check_case(*case, err, elapsed)
                assert not _leftovers(), "processes left running"
                assert list(launch(lambda: 1, nprocs=2)) == [1, 1], "next launch failed"
            except BaseException as exc:  # noqa: BLE001 - counted and reported
                if isinstance(exc, KeyboardInterrupt):
                    raise
                failures[name] += 1
                print(f"round {round_}: {name}: {type(exc).__name__}: {str(exc)[:300]}")
        print(
            f"round {round_}/{args.rounds} done, {sum(failures.values())} failures so far, "
            f"{time.monotonic() - started:.0f} s",
            flush=True,
        )
    shutdown()
    print(f"\n{len(CASES)} cases x {args.rounds} rounds = {len(CASES) * args.rounds} runs")
    if not failures:
        print("no flaky case")
        return 0
    for name, count in failures.most_common():
        print(f"FLAKY {name}: failed {count} of {args.rounds}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
