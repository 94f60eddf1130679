"""How long each exercise's check takes on its reference answer, as a learner runs it.

`make bench-checks`. Each exercise's `check()` (Exercise.evaluate: the learner's check,
not the grader's extra cases) is timed on the reference answer `--runs` times in this one
process, after one untimed run of every check (the launcher's helper warm, as in a
notebook after its first launch); the table gives the median and the slowest of the
timed runs. The target (issue 49): a median within 2 s on 2 cores. Then each check with
the grader's extra cases beside it, once, against the time its exercise declares
(`run_time`): within a fifth of it, so that a slower answer or a loaded machine still fits
(this was a timed test until a loaded machine failed it: a budget is a benchmark's).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from ddp_helpers.exercises import LESSONS, exercises_of


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="timed runs per check (median)")
    parser.add_argument("--only", nargs="*", help="exercise ids, e.g. 3.2 4.1 (default: all)")
    args = parser.parse_args()
    exercises = [ex for lesson in LESSONS for ex in exercises_of(lesson)]
    if args.only:
        exercises = [ex for ex in exercises if ex.id in args.only]
    for ex in exercises:  # warm: the helper started, DDP's imports done
        ex.evaluate(ex.reference)
    print(f"{'exercise':<28} {'median s':>9} {'slowest s':>10}  runs={args.runs}")
    worst = 0.0
    for ex in exercises:
        times = []
        for _ in range(args.runs):
            started = time.monotonic()
            result = ex.evaluate(ex.reference)
            times.append(time.monotonic() - started)
            if not result.passed:
                print(f"{ex.id} {ex.name}: the reference does not pass: {result.message}")
                return 1
        median = statistics.median(times)
        worst = max(worst, median)
        print(f"{ex.id + ' ' + ex.name:<28} {median:>9.2f} {max(times):>10.2f}")
    print(f"slowest median: {worst:.2f} s (target: 2 s)")
    return _against_declared(exercises)


def _against_declared(exercises) -> int:
    """Each check and its grader's extra cases, once, against a fifth of its run_time."""
    print(f"\n{'exercise':<28} {'check + extra s':>16} {'run_time / 5':>13}")
    missed = []
    for ex in exercises:
        started = time.monotonic()
        passed = ex.evaluate(ex.reference).passed
        if ex._hidden is not None:
            passed = passed and ex._run(ex._hidden, ex.reference).passed
        took, budget = time.monotonic() - started, ex.run_time / 5
        verdict = "MET" if passed and took <= budget else "MISSED"
        if verdict == "MISSED":
            missed.append(ex.id)
        print(f"{ex.id + ' ' + ex.name:<28} {took:>16.2f} {budget:>13.1f}  {verdict}")
    print(
        f"within a fifth of the declared time: {len(exercises) - len(missed)} of {len(exercises)}"
    )
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
