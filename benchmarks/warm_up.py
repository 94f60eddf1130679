"""What the zygote's warm-up (importing torch._dynamo) costs where no DDP model is built.

`make bench-warm-up`. The launcher's helper process imports torch._dynamo, which DDP imports
when it wraps a model, only where DDP models are built: lessons 02 to 04 say so
(`expect_ddp()`), and a rank that built one tells its zygote. Grading a submission starts
two zygotes: the kernel's, which runs the notebook, and the scorer's, which runs the checks.
For each solution, both are measured as they are and warmed up as every zygote was before
(`expect_ddp()` called first): the notebook graded (--no-sandbox, one at a time) as it is
and with a first cell calling it; the lesson's checks on their reference answers, in a
fresh process as the scorer runs them, without and with the call. Runs interleaved, so
that both see the same machine; wall seconds and CPU seconds (every process started),
medians. Only lesson 01 differs: the others ask for the warm-up themselves (the control).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ddp_helpers.paths import ROOT  # the repository, as the package finds it

WARM_CELL = "from ddp_helpers.launcher import expect_ddp\n\nexpect_ddp()"


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _warmed_copy(path: Path, folder: Path) -> Path:
    """The notebook with a first code cell that asks for the warm-up (same name, own folder)."""
    from ddp_helpers.nbformat_quick import nbformat

    nbf = nbformat()
    nb = nbf.read(path, as_version=4)
    nb.cells.insert(0, nbf.v4.new_code_cell(WARM_CELL))
    copy = folder / "warmed" / path.name
    copy.parent.mkdir(parents=True, exist_ok=True)
    nbf.write(nb, copy)
    return copy


def _graded(sub, confinement) -> tuple[float, float, str]:
    from ddp_helpers.grading.budget import TimeBudget
    from ddp_helpers.grading.orchestration.dispatch import grade_one

    cpu, started = _children_cpu(), time.monotonic()
    row = grade_one(sub, TimeBudget(), confinement=confinement)
    return time.monotonic() - started, _children_cpu() - cpu, f"{row.points}/{row.max_points}"


CHECKS = """
import sys
from ddp_helpers.exercises import exercises_of
from ddp_helpers.launcher import expect_ddp, shutdown
if sys.argv[2] == "True":
    expect_ddp()
for exercise in exercises_of(sys.argv[1]):
    exercise.evaluate(exercise.reference)
shutdown()  # the zygote waited for: its CPU, and its ranks', counted
"""


def _checks(lesson: str, warmed: bool) -> tuple[float, float]:
    """The lesson's checks on their references in a fresh process: (wall s, CPU s)."""
    cpu, started = _children_cpu(), time.monotonic()
    subprocess.run([sys.executable, "-c", CHECKS, lesson, str(warmed)], check=True, cwd=ROOT)
    return time.monotonic() - started, _children_cpu() - cpu


def _row(name: str, runs: dict[str, list[tuple]]) -> str:
    wall, cpu = ({k: statistics.median(r[i] for r in v) for k, v in runs.items()} for i in (0, 1))
    saved = 100 * (1 - cpu["as is"] / cpu["warmed"])
    return (
        f"{name:<44} {wall['as is']:>6.1f}s {wall['warmed']:>6.1f}s "
        f"{cpu['as is']:>6.1f}s {cpu['warmed']:>6.1f}s {saved:>+9.0f}%"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs of each (median)")
    parser.add_argument(
        "--lessons", default="01,02", help="the solutions to grade (default: 01,02)"
    )
    args = parser.parse_args()

    from ddp_helpers import grading
    from ddp_helpers.grading.confinement.sandbox import ConfinementRequest, choose

    # --no-sandbox: the sandbox's cost is another benchmark
    plain = choose(ConfinementRequest(sandbox=False))
    print(f"medians of {args.repeats} runs; 'warmed': expect_ddp() called first")
    print(f"{'':<44} {'wall':>7} {'warmed':>7} {'CPU':>7} {'warmed':>7} {'CPU saved':>10}")
    with tempfile.TemporaryDirectory() as tmp:
        for lesson in args.lessons.split(","):
            (path,) = sorted((ROOT / "solutions").glob(f"{lesson}_*.ipynb"))
            (sub,) = grading.find_submissions([path])
            (warmed,) = grading.find_submissions([_warmed_copy(path, Path(tmp))])
            graded = {"as is": [], "warmed": []}
            checks = {"as is": [], "warmed": []}
            for _ in range(args.repeats):  # interleaved
                for variant, submission in (("as is", sub), ("warmed", warmed)):
                    graded[variant].append(_graded(submission, plain))
                    checks[variant].append(_checks(lesson, variant == "warmed"))
            points = {p for r in graded.values() for *_, p in r}
            assert len(points) == 1, f"the warm-up changed a score: {graded}"
            print(_row(f"{path.name} graded ({points.pop()})", graded))
            print(_row("  its checks, as the scorer runs them", checks))
    return 0


if __name__ == "__main__":
    sys.exit(main())
