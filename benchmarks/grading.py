"""What grading costs: each solution run by nbclient alone, graded, and graded in the sandbox.

`make bench-grade`. For each solution notebook: the time to just execute it in a fresh
kernel (nbclient, what nbgrader and otter pay at least) next to the grader's time for it
with --no-sandbox (fresh kernel, answers taken out after every cell, checks in a separate
process) and with --sandbox (bubblewrap), runs interleaved so that both see the same
machine. Then every solution and lesson (English and Japanese) as one batch, --jobs 2, with
--no-sandbox and with --sandbox. Both are asked for by name, since the sandbox is the
default where it can run (and the bubblewrap it needs must be here: --sandbox refuses to
run without it). The sandbox's target: under 10 % overhead per submission.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from ddp_helpers.paths import ROOT  # the repository, as the package finds it


def _nbclient_seconds(path: Path) -> float:
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    started = time.monotonic()
    client = NotebookClient(nb, timeout=300, kernel_name="python3")
    client.extra_arguments = ["--log-level=ERROR"]  # not ipykernel's TCP warning
    client.execute()
    return time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2, help="runs per notebook (median)")
    args = parser.parse_args()

    from ddp_helpers import grading
    from ddp_helpers.grading.budget import TimeBudget
    from ddp_helpers.grading.confinement.sandbox import ConfinementRequest, choose
    from ddp_helpers.grading.orchestration.dispatch import grade_one

    # --no-sandbox, --sandbox
    plain, boxed = (choose(ConfinementRequest(sandbox=s)) for s in (False, True))
    solutions = sorted((ROOT / "solutions").glob("0*.ipynb"))
    print(f"medians of {args.repeats} runs, one submission at a time")
    print(
        f"{'notebook':<36} {'nbclient':>9} {'graded':>8} {'of which checks':>16} "
        f"{'--sandbox':>10} {'overhead':>9} {'points':>7}"
    )
    totals = {"plain": 0.0, "boxed": 0.0}
    for path in solutions:
        (sub,) = grading.find_submissions([path])
        alone = statistics.median(_nbclient_seconds(path) for _ in range(args.repeats))
        rows, boxed_rows = [], []
        for _ in range(args.repeats):  # interleaved: both see the same machine
            rows.append(grade_one(sub, TimeBudget(), confinement=plain))
            boxed_rows.append(grade_one(sub, TimeBudget(), confinement=boxed))
        graded = statistics.median(r.seconds for r in rows)
        sandboxed = statistics.median(r.seconds for r in boxed_rows)
        totals["plain"] += graded
        totals["boxed"] += sandboxed
        checks = statistics.median(r.score_seconds for r in rows)
        points = f"{rows[0].points}/{rows[0].max_points}"
        assert boxed_rows[0].points == rows[0].points, "the sandbox changed a score"
        print(
            f"{path.name:<36} {alone:>8.1f}s {graded:>7.1f}s {checks:>15.1f}s "
            f"{sandboxed:>9.1f}s {100 * (sandboxed / graded - 1):>+8.1f}% {points:>7}"
        )
    overhead = 100 * (totals["boxed"] / totals["plain"] - 1)
    verdict = "OK" if overhead < 10 else "MISS"
    print(f"sandbox overhead over the four: {overhead:+.1f}% (target < 10%: {verdict})")

    paths = [ROOT / "solutions", ROOT / "lessons"]  # and their Japanese editions, in ja/
    count = len(grading.find_submissions(paths))
    print(f"\nthe solutions and the lessons (English and Japanese: {count}) as one batch, --jobs 2")
    print(f"{'':<12} {'wall':>8} {'per submission':>15}")
    for label, conf in (("--no-sandbox", plain), ("--sandbox", boxed)):
        with tempfile.TemporaryDirectory() as tmp, open(Path(tmp) / "log", "w") as log:
            started = time.monotonic()
            options = grading.GradeOptions(out=Path(tmp) / "grades.csv", jobs=2, confinement=conf)
            rows = grading.grade(paths, options, stream=log)
            wall = time.monotonic() - started
        print(f"{label:<12} {wall:>7.0f}s {wall / len(rows):>14.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
