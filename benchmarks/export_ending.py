"""The exported training script's ending, soaked: Python's own teardown against os._exit.

`make ending-soak` (or `.venv/bin/python benchmarks/export_ending.py --runs 60`). Lesson
04's capstone is exported (`python -m ddp_helpers export`) and run for 2 epochs as 2 plain
processes on loopback (what a pod of a PyTorchJob does; torchrun's ranks exit the same
way), with three busy loops beside them, in two versions alternating in blocks: the script
as exported, whose main() ends with os._exit(0) after train_job returned the DDP model
(nothing is freed, no destructor runs), and the same script with those lines taken out and
the model kept in a global, so that the interpreter's teardown frees the model, its
process group and gloo's threads at exit. A run is clean when both ranks exit with 0 and
write nothing on stderr.

What 0 bad runs of N says: if the ending failed in a fraction f of runs, N clean runs
happen with probability (1 - f)^N; for N = 60, below 5 % once f >= 4.9 %. os._exit's
certainty is not statistical (no destructor runs, whatever the timing); the soak shows the
mechanism in use, and that the failure it removes is real here.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from ddp_helpers.paths import ROOT  # the repository, as the package finds it

HERE = Path(__file__).resolve().parent

sys.path[:0] = [str(HERE), str(ROOT / "tests" / "claims")]

from claims_support import plain_job  # noqa: E402
from soak import alternate, busy_loops, report, soak_arguments  # noqa: E402

from ddp_helpers.authoring.export import export_script  # noqa: E402

SOLUTION = ROOT / "solutions" / "04_sampler_and_checkpoint.ipynb"
ENDING = "    sys.stdout.flush()\n    sys.stderr.flush()\n    os._exit(0)\n"
MAIN_CALL = "    model = train_job(args.epochs, args.checkpoint)\n"
SETTINGS = {"Python's teardown, model kept to exit": False, "os._exit, as exported": True}


def _scripts(folder: Path) -> dict[bool, Path]:
    script, _ = export_script(SOLUTION, "train.py")
    if ENDING not in script:
        raise SystemExit("the exported script no longer ends with os._exit: update this soak")
    paths = {True: folder / "train_exits.py", False: folder / "train_returns.py"}
    paths[True].write_text(script)
    # The model kept in a global: freed by the interpreter's teardown, as a script that holds
    # it (or a cycle through it) to the end does.
    kept = "    global MODEL\n" + MAIN_CALL.replace("model =", "MODEL =")
    if MAIN_CALL not in script:
        raise SystemExit("main() no longer calls train_job as this soak expects: update it")
    paths[False].write_text(script.replace(ENDING, "").replace(MAIN_CALL, kept))
    return paths


def _block(scripts, exits: bool, runs: int, limit: float, folder: Path) -> list[str]:
    outcomes = []
    for i in range(runs):
        snapshot = folder / f"snapshot-{exits}-{i}.pt"
        args = ("--epochs", "2", "--checkpoint", str(snapshot))
        outcomes.append(plain_job(scripts[exits], 2, limit, args))
        snapshot.unlink(missing_ok=True)  # the next run trains from the start
    return outcomes


def main() -> int:
    args = soak_arguments(__doc__.splitlines()[0], runs=60, limit=60.0, block=10, busy=3)
    with tempfile.TemporaryDirectory(prefix="ending-soak-") as tmp:
        folder = Path(tmp)
        scripts = _scripts(folder)
        with busy_loops(args.busy):
            results = alternate(
                SETTINGS,
                args.runs,
                args.block,
                lambda exits, n: _block(scripts, exits, n, args.limit, folder),
            )
    report(results, "ending with os._exit is no better")
    return 0


if __name__ == "__main__":
    sys.exit(main())
