"""gloo's teardown deadlock in plain processes (no launcher), with a busy Python thread or not.

`make teardown-plain-soak` (or `.venv/bin/python benchmarks/gloo_teardown_plain.py --runs 15`).
Each run starts 2 plain processes (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set, as
torchrun does; none of the course's launcher's settings) that train a DDP model 3 steps on
gloo, then call `dist.destroy_process_group()` and free the model (`del model`). In two
settings each rank also runs a second Python thread that spins (`while True: pass`), as a
logger, a progress bar or a data thread keeps the interpreter busy; in the third it does
not. After the freeing a rank leaves a mark beside its script, then ends with `os._exit(0)`
(only the freeing can hang) or with Python's own exit. A run not back within `--limit`
seconds hung, and says whether its ranks got past the freeing. The settings alternate in
blocks; Fisher's exact test compares each with the first. Only loopback addresses are used.
"""

from __future__ import annotations

import inspect
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests" / "claims")]

from claims_support import plain_job  # noqa: E402
from gloo_teardown import train_destroy_free  # noqa: E402
from soak import alternate, busy_loops, report, soak_arguments  # noqa: E402

# The launcher soak's own rank function (gloo_teardown.py), run as a plain script: the same
# DDP steps, destroy and free, then the mark and the chosen ending.
RANK = """\
import os
import threading


def spin():
    while True:
        pass


if {spin}:
    threading.Thread(target=spin, daemon=True).start()
{train_destroy_free}
train_destroy_free()
with open(os.path.join(os.path.dirname(__file__), "freed-" + os.environ["RANK"]), "w"):
    pass
if {quick_exit}:
    os._exit(0)  # past the freeing: Python's own exit is not what is measured
"""
SETTINGS = {
    "a second Python thread spinning, then os._exit": (True, True),
    "a second Python thread spinning, then Python's exit": (True, False),
    "no other thread, then Python's exit": (False, False),
}


def _run(script: Path, limit: float) -> str:
    outcome = plain_job(script, 2, limit)
    freed = [script.parent / f"freed-{rank}" for rank in range(2)]
    if "hung" in outcome:
        past = sum(f.exists() for f in freed)
        outcome += f" ({past} of 2 ranks past the freeing)"
    for f in freed:
        f.unlink(missing_ok=True)
    return outcome


def _block(setting: tuple, runs: int, limit: float, folder: Path) -> list[str]:
    spin, quick_exit = setting
    script = folder / f"rank_{int(spin)}{int(quick_exit)}" / "rank.py"
    script.parent.mkdir(exist_ok=True)
    body = inspect.getsource(train_destroy_free)
    script.write_text(RANK.format(spin=spin, quick_exit=quick_exit, train_destroy_free=body))
    return [_run(script, limit) for _ in range(runs)]


def main() -> int:
    args = soak_arguments(__doc__.splitlines()[0], runs=15, limit=20.0, block=5, busy=0)
    with tempfile.TemporaryDirectory(prefix="teardown-plain-") as tmp, busy_loops(args.busy):
        results = alternate(
            SETTINGS, args.runs, args.block, lambda s, n: _block(s, n, args.limit, Path(tmp))
        )
    report(results, "no other thread is no better")
    return 0


if __name__ == "__main__":
    sys.exit(main())
