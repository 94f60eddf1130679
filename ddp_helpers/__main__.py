"""The command line: `python -m ddp_helpers build`, `export`, `grade`, `merge`, `autograder`."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .authoring.translations import EDITIONS
from .exercises import LESSONS
from .paths import ROOT


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected seconds above 0, got {text!r}")
    return value


def _size(text: str) -> int:
    from .grading.confinement.sandbox import parse_size

    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _disk(text: str) -> int:
    from .grading.confinement.sandbox import parse_disk

    try:
        return parse_disk(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _env_name(text: str) -> str:
    from .grading.confinement.sandbox import env_name

    try:
        return env_name(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _pattern(text: str):
    from .grading.orchestration.submissions import student_pattern

    try:
        return student_pattern(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(prog="python -m ddp_helpers", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    for name, (fill, run, about) in _COMMANDS.items():
        sub = commands.add_parser(name, help=about[0], description=about[-1])
        sub.set_defaults(run=run)
        # Only the command run gets its options, so that `build` loads nothing of the grader.
        if argv[:1] == [name]:
            fill(sub)
    if argv[:1] == ["grade"] and _named_like_options(argv[1:]):
        return _error(GLOB_TEXT["files"].format(files=", ".join(_named_like_options(argv[1:]))))
    args = parser.parse_args(argv)
    return args.run(args, parser)


def _error(exc) -> int:
    print(f"error: {exc}", file=sys.stderr)
    return 2


# ---------------------------------------------------------------- build


def _fill_build(build) -> None:
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
    build.add_argument(
        "--lang",
        action="append",
        choices=["en", *EDITIONS],
        help="with --execute: run only this edition's notebooks (repeatable; default: all)",
    )
    for root, what in (("solutions", "the solutions it reads"), ("lessons", "where it writes")):
        build.add_argument(
            f"--{root}",
            metavar="DIR",
            type=Path,
            default=ROOT / root,
            help=f"{what} (default: the repository's {root}/)",
        )


def _build(args, parser) -> int:
    from .authoring.build import BuildError, build_lessons, execute_solutions

    try:
        if (args.only or args.lang) and not args.execute:
            parser.error(
                "--only and --lang go with --execute: build --check and build always see "
                "every lesson"
            )
        if args.execute:
            if args.lang != ["en"]:  # the translated solutions take the English code first
                build_lessons(args.solutions, args.lessons)
            execute_solutions(args.solutions, only=args.only, languages=args.lang)
        problems = build_lessons(args.solutions, args.lessons, check=args.check)
    except BuildError as exc:
        return _error(exc)
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    return 1 if problems else 0


# ---------------------------------------------------------------- export


def _fill_export(export) -> None:
    export.add_argument("notebook", help="e.g. solutions/04_sampler_and_checkpoint.ipynb")
    export.add_argument("-o", "--output", default="train.py", help="the script to write")
    export.add_argument(
        "--slurm", action="store_true", help="also an sbatch script for it, beside it (.sbatch)"
    )
    export.add_argument(
        "--kubernetes",
        action="store_true",
        help="also Kubeflow manifests for it, beside it (.pytorchjob.yaml, .trainjob.yaml)",
    )


def _export(args, parser) -> int:
    from .authoring.export import ExportError
    from .authoring.export import export as export_notebook

    try:
        print(export_notebook(args.notebook, args.output, args.slurm, args.kubernetes))
    except (ExportError, OSError) as exc:
        return _error(exc)
    return 0


# ---------------------------------------------------------------- grade

# A learner may name a file `--out=alice_week1.ipynb`: `grade *.ipynb` then hands the grader
# that option, and the CSV would be written over alice's notebook.
GLOB_TEXT = {
    "files": (
        "{files}: a file here named like an option, which the shell's glob (*.ipynb) gave the "
        "grader as one (--out=... would write the CSV onto a submission). Put -- before the "
        "submissions, so that everything after it is a path: python -m ddp_helpers grade "
        "--out grades.csv -- *.ipynb; or rename the file. Nothing was graded or written."
    ),
    "value": (
        "{option} {value} names a notebook that is there, and the grader would write onto "
        "it. If the shell's glob gave it a learner's file named {option}={value}, put -- "
        "before the submissions (python -m ddp_helpers grade --out grades.csv -- *.ipynb) or "
        "rename that file; else give {option} a path of its own. Nothing was graded or "
        "written."
    ),
}


def _named_like_options(words: list[str]) -> list[str]:
    """The words before `--` that start with '-' and are files here: what a glob expanded
    to (no option of grade is a file's name)."""
    words = words[: words.index("--")] if "--" in words else words
    return [word for word in words if word.startswith("-") and os.path.lexists(word)]


def _notebook_as_output(args) -> str | None:
    """Why an output option that names a notebook there is refused, or None."""
    for option in ("out", "feedback", "gradescope", "report"):
        value = getattr(args, option)
        if value is not None and str(value).endswith(".ipynb") and os.path.lexists(value):
            return GLOB_TEXT["value"].format(option=f"--{option}", value=value)
    return None


def _fill_grade(grade) -> None:
    from .grading.defaults import DEFAULT_OUT

    grade.add_argument("paths", nargs="+", metavar="PATH", help="notebooks or folders of them")
    grade.add_argument("--out", default=DEFAULT_OUT, help="the CSV to write (%(default)s)")
    grade.add_argument("--feedback", metavar="DIR", help="write one Markdown file per submission")
    _add_timeout(grade, "; each exercise's check gets as long, at least 60")
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
    _add_grade_outputs(grade.add_argument_group("for an LMS, Gradescope and the instructor"))
    _add_confinement(grade.add_argument_group("confinement of each submission"))


def _add_timeout(parser, more: str) -> None:
    """--timeout, as grade and autograder both take it (`more` ends its help)."""
    from .grading.defaults import DEFAULT_TIMEOUT

    parser.add_argument(
        "--timeout",
        type=_positive,
        default=DEFAULT_TIMEOUT,
        metavar="S",
        help="seconds a notebook may run (default %(default)g)" + more,
    )


def _add_visibility(parser) -> None:
    """--hidden-visibility, as grade and autograder both take it."""
    from .grading.defaults import DEFAULT_VISIBILITY, VISIBILITIES

    parser.add_argument(
        "--hidden-visibility",
        choices=VISIBILITIES,
        default=DEFAULT_VISIBILITY,
        help="when Gradescope shows the grader's extra cases (%(default)s)",
    )


def _add_grade_outputs(outputs) -> None:
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
    _add_visibility(outputs)
    outputs.add_argument(
        "--report", metavar="FILE", help="write the class report: what the class got wrong (HTML)"
    )


def _add_confinement(box) -> None:
    from .grading.defaults import DEFAULT_TASKS, sandbox_from_env

    box.add_argument(
        "--sandbox",
        action=argparse.BooleanOptionalAction,
        default=sandbox_from_env(os.environ.get("DDP_HELPERS_SANDBOX")),
        help="run kernels, ranks and checks inside bubblewrap: loopback only, the course "
        "read-only, nothing else of the file system. Default: where bubblewrap can run (a "
        "note says so where it cannot); --sandbox refuses to grade without it; "
        "DDP_HELPERS_SANDBOX=1 or 0 is --sandbox or --no-sandbox",
    )
    box.add_argument(
        "--pass-env",
        action="append",
        default=[],
        type=_env_name,
        metavar="NAME",
        help="pass this variable of yours to every notebook (repeatable); they get only "
        "PATH, locale, the course's own and a few more (docs/instructors.md)",
    )
    box.add_argument("--memory", type=_size, metavar="SIZE", help="memory limit, e.g. 4G")
    box.add_argument(
        "--disk",
        type=_disk,
        metavar="SIZE",
        help="what a notebook may write into its folders, logs included (default 1G)",
    )
    box.add_argument(
        "--tasks",
        type=int,
        metavar="N",
        help=f"limit on processes and threads (default {DEFAULT_TASKS})",
    )
    box.add_argument(
        "--threads", type=int, default=1, metavar="N", help="CPU threads per process (1)"
    )
    box.add_argument(
        "--limits",
        choices=("cgroup2", "cgroup1", "rlimit"),
        help="how the limits are held (default: the first of these that works here); for "
        "troubleshooting",
    )


def _grade(args, parser) -> int:
    from .grading import ConfinementRequest, GradeOptions, GradingError, TimeBudget, run_batch
    from .grading.confinement.sandbox import SandboxError

    if args.jobs < 1:
        parser.error("--jobs must be 1 or more")
    if args.threads < 1:
        parser.error("--threads must be 1 or more")
    if _notebook_as_output(args) is not None:
        return _error(_notebook_as_output(args))
    options = GradeOptions(
        out=args.out,
        feedback=args.feedback,
        budget=TimeBudget(notebook=args.timeout),
        jobs=args.jobs,
        lesson=args.lesson,
        gradescope=args.gradescope,
        hidden_visibility=args.hidden_visibility,
        student_from=args.student_from,
        report=args.report,
        request=ConfinementRequest(
            sandbox=args.sandbox,
            memory=args.memory,
            tasks=args.tasks,
            threads=args.threads,
            pass_env=tuple(args.pass_env),
            limits=args.limits,
            disk=args.disk,
        ),
    )
    try:
        run_batch(args.paths, options)
    except (SandboxError, GradingError) as exc:
        return _error(exc)
    except OSError as exc:  # the CSV, the feedback folder, or the temporary folder
        return _error(_unwritable(exc, args.out))
    except KeyboardInterrupt:
        return 130
    return 0


def _unwritable(exc: OSError, out) -> str:
    where = exc.filename or f"{out} or the temporary folder (TMPDIR)"
    return (
        f"cannot write {where} ({exc.strerror or exc}): give --out and --feedback paths in a "
        "folder you can write to, with free space."
    )


# ---------------------------------------------------------------- pace, autograder, merge


def _fill_pace(pace) -> None:
    pace.add_argument(
        "--write",
        action="store_true",
        help="state the counted times in the solutions and their translations (the lesson's "
        "top, each Going further heading); then run `build`",
    )
    pace.add_argument(
        "--only",
        action="append",
        metavar="NN",
        help="this lesson only (01, 02, ...; may be repeated): print, or with --write state, "
        "its times and no other's",
    )


def _pace(args, parser) -> int:
    from .authoring.pace import main as pace

    pace((["--write"] if args.write else []) + [f"--only={n}" for n in args.only or []])
    return 0


def _fill_autograder(autograder) -> None:
    from .grading.defaults import DEFAULT_ZIP

    autograder.add_argument(
        "--lesson", required=True, choices=sorted(LESSONS), help="the lesson it grades"
    )
    autograder.add_argument("--out", default=DEFAULT_ZIP, help="the zip to write (%(default)s)")
    _add_timeout(autograder, ", as for grade")
    _add_visibility(autograder)


def _autograder(args, parser) -> int:
    from .grading.gradescope.config import AutograderError
    from .grading.gradescope.generate import build_autograder

    try:
        print(build_autograder(args.lesson, args.out, args.timeout, args.hidden_visibility))
    except (AutograderError, OSError) as exc:
        return _error(exc)
    return 0


def _fill_merge(merge) -> None:
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


def _merge(args, parser) -> int:
    from .grading.outputs.gradebook import MergeError, merge

    try:
        merge(args.grades, args.into, args.key, args.column, args.out, args.lesson, sys.stderr)
    except (MergeError, OSError) as exc:
        return _error(exc)
    return 0


# Each command: how its options are added, what runs it, and its help (then its description).
_COMMANDS = {
    "build": (_fill_build, _build, ("write lessons/ from solutions/",)),
    "export": (_fill_export, _export, ("a notebook's training code as a torchrun script",)),
    "grade": (
        _fill_grade,
        _grade,
        (
            "run and score learners' notebooks; write a CSV of grades",
            "Run each submitted notebook in a fresh kernel and score its exercises with the "
            "grader's own checks. One CSV row per submission.",
        ),
    ),
    "pace": (
        _fill_pace,
        _pace,
        ("each lesson's core-path estimate, part by part (the figure atop each notebook)",),
    ),
    "autograder": (
        _fill_autograder,
        _autograder,
        (
            "Gradescope's autograder zip for one lesson (setup.sh, run_autograder, the grader)",
            "Build the zip to upload as a Gradescope programming assignment's autograder: "
            "setup.sh installs CPU-only torch and this course's package at its pins; "
            "run_autograder grades the submitted notebook into results.json, Gradescope's "
            "container being the sandbox.",
        ),
    ),
    "merge": (
        _fill_merge,
        _merge,
        (
            "put the points of grades.csv into an LMS gradebook export, ready to import",
            "Write the gradebook again with each learner's points in one column, matching the "
            "export's --key column with the student column of grades.csv.",
        ),
    ),
}


if __name__ == "__main__":
    sys.exit(main())
