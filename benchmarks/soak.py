"""What the soak benchmarks share: settings alternated in blocks under busy loops, each
run 'clean' or what went wrong, and Fisher's exact test on the bad runs."""

from __future__ import annotations

import argparse
import contextlib
import math
import subprocess
import sys
import time
from collections.abc import Callable

BUSY = "while True: pass"


def fisher_one_sided(bad_a: int, runs_a: int, bad_b: int, runs_b: int) -> float:
    """P(b has at most bad_b bad runs | the margins), if both settings were alike."""
    bad, total = bad_a + bad_b, runs_a + runs_b
    return sum(
        math.comb(runs_b, k) * math.comb(runs_a, bad - k)
        for k in range(max(0, bad - runs_a), min(bad_b, bad) + 1)
    ) / math.comb(total, bad)


@contextlib.contextmanager
def busy_loops(count: int):
    """`count` processes that keep a core busy each, for as long as the block runs."""
    procs = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(count)]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def alternate(
    settings: dict, runs: int, block: int, run_block: Callable[[object, int], list[str]]
) -> dict[str, list[str]]:
    """Each setting's outcomes: `run_block(value, n)` in turn, n runs at a time, until every
    setting has `runs`; the tally so far printed after each round."""
    results: dict[str, list[str]] = {name: [] for name in settings}
    started = time.monotonic()
    while any(len(r) < runs for r in results.values()):
        for name, value in settings.items():
            results[name] += run_block(value, min(block, runs - len(results[name])))
        line = ", ".join(f"{n}: {_bad(r)} bad of {len(r)}" for n, r in results.items())
        print(f"[{time.monotonic() - started:5.0f} s] {line}", flush=True)
    return results


def _bad(outcomes: list[str]) -> int:
    return len(outcomes) - outcomes.count("clean")


def report(results: dict[str, list[str]], claim: str) -> None:
    """Each setting's bad runs and why, then how likely the second is no better by chance."""
    width = max(map(len, results)) + 2
    print()
    for name, outcomes in results.items():
        print(f"{name:{width}} {_bad(outcomes):4d} bad of {len(outcomes)}")
        for why in sorted(set(outcomes) - {"clean"}):
            print(f"{'':{width}} {outcomes.count(why):4d} x {why}")
    (first_name, first), *others = results.items()
    for name, other in others:  # each later setting against the first
        p = fisher_one_sided(_bad(first), len(first), _bad(other), len(other))
        said = claim if len(others) == 1 else f"{name} is no better than {first_name}"
        print(f"Fisher's exact test, one-sided: p = {p:.2g} that {said}")


def soak_arguments(
    description: str,
    *,
    runs: int,
    limit: float,
    block: int | None = None,
    busy: int | None = None,
    limit_help: str = "seconds before 'hung'",
) -> argparse.Namespace:
    """A soak's command line: --runs of each setting, --block runs before switching (where
    the settings alternate in blocks), --busy loops beside the ranks (where load matters),
    --limit seconds."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--runs", type=int, default=runs, help="runs of each setting")
    if block is not None:
        parser.add_argument("--block", type=int, default=block, help="runs before switching")
    if busy is not None:
        parser.add_argument("--busy", type=int, default=busy, help="busy loops beside the ranks")
    parser.add_argument("--limit", type=float, default=limit, help=limit_help)
    return parser.parse_args()
