"""The command line: `python -m ddp_helpers build [--check] [--execute]` and `export`."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ddp_helpers", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="write lessons/ from solutions/")
    build.add_argument(
        "--check", action="store_true", help="write nothing; fail if lessons/ is out of date"
    )
    build.add_argument(
        "--execute",
        action="store_true",
        help="first run every solution notebook and store its outputs",
    )
    export = commands.add_parser("export", help="a notebook's training code as a torchrun script")
    export.add_argument("notebook", help="e.g. solutions/04_sampler_and_checkpoint.ipynb")
    export.add_argument("-o", "--output", default="train.py", help="the script to write")
    args = parser.parse_args(argv)

    if args.command == "export":
        from .export import ExportError
        from .export import export as export_notebook

        try:
            print(export_notebook(args.notebook, args.output))
        except (ExportError, OSError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        return 0

    if args.command == "build":
        from .build import BuildError, build_lessons, execute_solutions

        try:
            if args.execute:
                execute_solutions()
            problems = build_lessons(check=args.check)
        except BuildError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        for problem in problems:
            print(f"error: {problem}", file=sys.stderr)
        return 1 if problems else 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
