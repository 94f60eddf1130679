"""`python -m ddp_helpers.grading.gradescope setup SOURCE | run [--root ROOT]`: the Python
side of setup.sh and run_autograder in Gradescope's image (image.py, run.py)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .config import AutograderError
from .image import finish_setup
from .run import run


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ddp_helpers.grading.gradescope",
        description="The Python side of setup.sh and run_autograder in Gradescope's image.",
    )
    steps = parser.add_subparsers(dest="step", required=True)
    setup = steps.add_parser("setup", help="check the installation; record this Python")
    setup.add_argument("source", help="the unpacked zip (/autograder/source)")
    grade = steps.add_parser("run", help="grade root/submission into root/results")
    grade.add_argument(
        "--root", default=os.environ.get("AUTOGRADER_ROOT", "/autograder"), help="(/autograder)"
    )
    args = parser.parse_args(argv)
    try:
        if args.step == "setup":
            print(finish_setup(Path(args.source)))
            return 0
        return run(Path(args.root))
    except AutograderError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
