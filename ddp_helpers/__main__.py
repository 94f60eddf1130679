"""The command line: `python -m ddp_helpers build`, `export`, `grade`, `merge`, `autograder`."""

from __future__ import annotations

import argparse
import os
import sys

from .exercises import LESSONS
from .grading.batch import DEFAULT_TIMEOUT
from .grading.gradescope import VISIBILITIES
from .grading.sandbox import DEFAULT_TASKS


def _interrupt_on_termination() -> None:
    """SIGTERM and SIGHUP (a closed terminal) stop the grader as Ctrl-C does: cleanly."""
    import signal

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, interrupt)


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected seconds above 0, got {text!r}")
    return value


def _size(text: str) -> int:
    from .grading.sandbox import parse_size

    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _pattern(text: str):
    from .grading.submissions import student_pattern

    try:
        return student_pattern(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ddp_helpers", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="write lessons/ from solutions/")
    how = build.add_mutually_exclusive_group()
    how.add_argument(
        "--check", action="store_true", help="write nothing; fail if lessons/ is out of date"
    )
    how.add_argument(
        "--execute",
        action="store_true",
        help="first run every solution notebook and store its outputs",
    )
    build.add_argument(
        "--only",
        metavar="NN",
        action="append",
        choices=sorted(LESSONS),
        help="with --execute: run only this lesson's solution notebook (repeatable)",
    )
    export = commands.add_parser("export", help="a notebook's training code as a torchrun script")
    export.add_argument("notebook", help="e.g. solutions/04_sampler_and_checkpoint.ipynb")
    export.add_argument("-o", "--output", default="train.py", help="the script to write")
    grade = commands.add_parser(
        "grade",
        help="run and score learners' notebooks; write a CSV of grades",
        description="Run each submitted notebook in a fresh kernel and score its exercises "
        "with the grader's own checks. One CSV row per submission.",
    )
    grade.add_argument("paths", nargs="+", metavar="PATH", help="notebooks or folders of them")
    grade.add_argument("--out", default="grades.csv", help="the CSV to write (grades.csv)")
    grade.add_argument("--feedback", metavar="DIR", help="write one Markdown file per submission")
    grade.add_argument(
        "--timeout",
        type=_positive,
        default=DEFAULT_TIMEOUT,
        metavar="S",
        help="seconds a notebook may run (default %(default)g); each exercise's check gets "
        "as long, at least 60",
    )
    grade.add_argument(
        "--jobs",
        type=int,
        default=1,
        metavar="N",
        help="submissions graded at once (each runs 2 ranks: about cores / 2)",
    )
    grade.add_argument(
        "--lesson",
        choices=sorted(LESSONS),
        help="the lesson asked for: notebooks of other lessons are invalid",
    )
    outputs = grade.add_argument_group("for an LMS, Gradescope and the instructor")
    outputs.add_argument(
        "--student-from",
        metavar="PATTERN",
        type=_pattern,
        help="a regular expression that finds the student in each submission's path (its "
        "group 'student', or its first group); default: the learner's folder",
    )
    outputs.add_argument(
        "--gradescope",
        metavar="DIR",
        help="write Gradescope's results.json per submission (DIR/results.json for one)",
    )
    outputs.add_argument(
        "--hidden-visibility",
        choices=VISIBILITIES,
        default="after_published",
        help="when Gradescope shows the grader's extra cases (%(default)s)",
    )
    outputs.add_argument(
        "--report", metavar="FILE", help="write the class report: what the class got wrong (HTML)"
    )
    box = grade.add_argument_group("confinement of each submission")
    box.add_argument(
        "--sandbox",
        action=argparse.BooleanOptionalAction,
        default=os.environ.get("DDP_HELPERS_SANDBOX", "") not in ("", "0"),
        help="run kernels, ranks and checks inside bubblewrap: loopback only, the course "
        "read-only, nothing else of the file system (default on when DDP_HELPERS_SANDBOX=1)",
    )
    box.add_argument("--memory", type=_size, metavar="SIZE", help="memory limit, e.g. 4G")
    box.add_argument(
        "--tasks",
        type=int,
        metavar="N",
        help=f"limit on processes and threads (default {DEFAULT_TASKS})",
    )
    box.add_argument(
        "--threads", type=int, default=1, metavar="N", help="CPU threads per process (1)"
    )
    commands.add_parser(
        "pace",
        help="each lesson's core-path estimate, part by part (the figure atop each notebook)",
    )
    autograder = commands.add_parser(
        "autograder",
        help="Gradescope's autograder zip for one lesson (setup.sh, run_autograder, the grader)",
        description="Build the zip to upload as a Gradescope programming assignment's "
        "autograder: setup.sh installs CPU-only torch and this course's package at its pins; "
        "run_autograder grades the submitted notebook into results.json, Gradescope's "
        "container being the sandbox.",
    )
    autograder.add_argument(
        "--lesson", required=True, choices=sorted(LESSONS), help="the lesson it grades"
    )
    autograder.add_argument(
        "--out", default="autograder.zip", help="the zip to write (%(default)s)"
    )
    autograder.add_argument(
        "--timeout",
        type=_positive,
        default=DEFAULT_TIMEOUT,
        metavar="S",
        help="seconds a notebook may run (default %(default)g), as for grade",
    )
    autograder.add_argument(
        "--hidden-visibility",
        choices=VISIBILITIES,
        default="after_published",
        help="when Gradescope shows the grader's extra cases (%(default)s)",
    )
    merge = commands.add_parser(
        "merge",
        help="put the points of grades.csv into an LMS gradebook export, ready to import",
        description="Write the gradebook again with each learner's points in one column, "
        "matching the export's --key column with the student column of grades.csv.",
    )
    merge.add_argument("grades", help="the CSV `grade` wrote")
    merge.add_argument("--into", required=True, metavar="CSV", help="the LMS's gradebook export")
    merge.add_argument(
        "--key",
        required=True,
        help="the export's column that holds the student (e.g. 'SIS Login ID')",
    )
    merge.add_argument(
        "--column", required=True, help="the assignment's column (made if the export has none)"
    )
    merge.add_argument("--lesson", choices=sorted(LESSONS), help="only this lesson's rows")
    merge.add_argument("-o", "--out", required=True, help="the file to import")
    args = parser.parse_args(argv)

    if args.command == "autograder":
        from .grading.autograder import AutograderError, build_autograder

        try:
            print(build_autograder(args.lesson, args.out, args.timeout, args.hidden_visibility))
        except (AutograderError, OSError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        return 0
    if args.command == "pace":
        from .authoring.pace import main as pace

        pace()
        return 0
    if args.command == "merge":
        from .grading.gradebook import MergeError
        from .grading.gradebook import merge as merge_grades

        try:
            merge_grades(
                args.grades, args.into, args.key, args.column, args.out, args.lesson, sys.stderr
            )
        except (MergeError, OSError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        return 0

    if args.command == "grade":
        from .grading import GradingError
        from .grading import grade as grade_all

        if args.jobs < 1:
            parser.error("--jobs must be 1 or more")
        if args.threads < 1:
            parser.error("--threads must be 1 or more")
        from .grading.sandbox import SandboxError, choose
        from .procs import become_subreaper, kill_descendants

        try:
            confinement = choose(args.sandbox, args.memory, args.tasks, args.threads)
        except (SandboxError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2

        # A worker killed from outside leaves its processes to this one, which stops them.
        become_subreaper()
        _interrupt_on_termination()
        try:
            grade_all(
                args.paths,
                args.out,
                args.feedback,
                args.timeout,
                args.jobs,
                args.lesson,
                confinement=confinement,
                gradescope=args.gradescope,
                hidden_visibility=args.hidden_visibility,
                student_from=args.student_from,
                report=args.report,
            )
        except GradingError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        except OSError as exc:  # the CSV, the feedback folder, or the temporary folder
            where = exc.filename or f"{args.out} or the temporary folder (TMPDIR)"
            print(
                f"error: cannot write {where} ({exc.strerror or exc}): give --out and "
                "--feedback paths in a folder you can write to, with free space.",
                file=sys.stderr,
            )
            return 2
        except KeyboardInterrupt:
            return 130
        finally:
            kill_descendants()
        return 0

    if args.command == "export":
        from .authoring.export import ExportError
        from .authoring.export import export as export_notebook

        try:
            print(export_notebook(args.notebook, args.output))
        except (ExportError, OSError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        return 0

    if args.command == "build":
        from .authoring.build import BuildError, build_lessons, execute_solutions

        try:
            if args.only and not args.execute:
                parser.error(
                    "--only goes with --execute: build --check and build always see every lesson"
                )
            if args.execute:
                execute_solutions(only=args.only)
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
