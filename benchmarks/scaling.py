"""Training throughput on 1 and 2 ranks (CPU, one thread per rank), measured in one run.

`make scaling`. For lesson 03's model and a wide version of it, prints examples/s and the
speed-up against the limit of 2x.
"""

from __future__ import annotations

import argparse
import sys


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=512, help="examples per rank per step")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    from ddp_helpers import shutdown
    from ddp_helpers.demos.scaling import measure_models

    results = measure_models((1, 2), repeats=args.repeats, batch=args.batch)
    print(
        f"{args.batch} examples per rank per step, one thread per rank, medians of "
        f"{args.repeats} runs"
    )
    print(f"{'model':<30} {'ranks':>5}  {'examples/s':>11}  {'speed-up':>8}  {'limit':>5}")
    for name, result in results.items():
        for n, rate in result.items():
            print(f"{name:<30} {n:>5}  {rate:>11.0f}  {rate / result[1]:>7.2f}x  {n:>4}x")
    shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
