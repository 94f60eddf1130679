"""What grading writes: the CSV (its columns, its rows), one feedback file per learner, the
summary."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from ... import i18n
from ...exercises import exercises_of
from ...exercises.texts import status_names
from ...exercises.verdicts import mark
from ...files import replaced_whole
from ..results import STATUSES, Row, Status, Submission
from ..words import FEEDBACK
from .escape import code_block, csv_cell, markdown, markdown_fill

# What the instructor reads (the batch's summary): English only.
INSTRUCTOR_TEXT = {
    "summary_head": (
        "Graded {count} submission{s} in {wall:.0f} s ({per:.1f} s per notebook run, "
        "{jobs} at a time)."
    ),
    "summary_status": "status: {counts}",
    "summary_means": "mean points per exercise (submissions that ran):",
    "summary_mean": "  {column:<32} {mean:.2f} of {max}  (n={n})",
}


def in_order(rows: list[Row], subs: list[Submission]) -> list[Row]:
    """rows sorted as their submissions were given."""
    order = {s.name: i for i, s in enumerate(subs)}
    return sorted(rows, key=lambda r: order[r.submission.name])


# ---------------------------------------------------------------- the CSV


# After the points of every exercise, so that each column before them stays where it was.
MISTAKE_COLUMN = "{column} mistake"


def columns_for(subs: list[Submission]) -> list[tuple[str, str]]:
    """(lesson, column name) of every exercise of the lessons in the batch, in order."""
    lessons = sorted({s.lesson for s in subs if s.lesson and s.problem is None})
    return [(lesson, f"{ex.id} {ex.name}") for lesson in lessons for ex in exercises_of(lesson)]


def csv_header(columns: list[tuple[str, str]]) -> list[str]:
    names = [n for _, n in columns]
    return ["submission", "student", "lesson", "status", "points", "max_points"] + [
        *names,
        *(MISTAKE_COLUMN.format(column=n) for n in names),
    ]


def csv_cells(row: Row, columns: list[tuple[str, str]]) -> list:
    """A row of grades.csv: the fixed columns, the points of each exercise column, then
    each exercise's mistake key (empty when correct)."""
    graded = row.status is not Status.INVALID
    earned = {e.column: e.points for e in row.exercises} if graded else {}
    mistakes = {e.column: e.mistake or "" for e in row.exercises} if graded else {}
    fixed = [
        row.submission.name,
        row.submission.student,
        row.submission.lesson or "",
        row.status.value,
        row.points,
        row.max_points if row.max_points is not None else "",
    ]
    names = [name for _, name in columns]
    cells = fixed + [earned.get(n, "") for n in names] + [mistakes.get(n, "") for n in names]
    return [csv_cell(cell) for cell in cells]


# ---------------------------------------------------------------- the summary


def summary(rows: list[Row], columns, wall: float, jobs: int) -> list[str]:
    """The end-of-batch lines: counts per status, mean points per exercise."""
    count = len(rows)
    ran = [r for r in rows if r.status is not Status.INVALID]  # the invalid ones take no time
    lines = [
        INSTRUCTOR_TEXT["summary_head"].format(
            count=count,
            s="" if count == 1 else "s",
            wall=wall,
            per=(sum(r.seconds for r in ran) / len(ran)) if ran else 0.0,
            jobs=jobs,
        )
    ]
    counts = {s: sum(r.status.value == s for r in rows) for s in STATUSES}
    lines.append(
        INSTRUCTOR_TEXT["summary_status"].format(
            counts=" · ".join(f"{s} {n}" for s, n in counts.items())
        )
    )
    if columns:
        lines.append(INSTRUCTOR_TEXT["summary_means"])
    for lesson, column in columns:
        earned = [
            (e.points, e.max)
            for r in ran
            if r.submission.lesson == lesson
            for e in r.exercises
            if e.column == column
        ]
        if earned:
            mean = sum(p for p, _ in earned) / len(earned)
            lines.append(
                INSTRUCTOR_TEXT["summary_mean"].format(
                    column=column, mean=mean, max=earned[0][1], n=len(earned)
                )
            )
    return lines


# ---------------------------------------------------------------- feedback


def feedback_names(subs: list[Submission]) -> dict[str, str]:
    """Each submission's feedback file: its shown path, flattened, as .md; unique, short."""
    names: dict[str, str] = {}
    taken: set[str] = set()
    for sub in subs:
        stem = sub.name[: -len(".ipynb")] if sub.name.endswith(".ipynb") else sub.name
        stem = re.sub(r"[\\/]+", "__", stem.lstrip("./"))
        stem = re.sub(r"[^\w.\-]+", "_", stem)
        if len(stem) > 120 or stem.lower() in taken:  # too long for a file name, or a clash
            digest = hashlib.sha1(sub.name.encode()).hexdigest()[:8]
            stem = f"{stem[:110]}-{digest}"
        taken.add(stem.lower())
        names[sub.name] = stem + ".md"
    return names


def write_feedback(row: Row, path: Path, timeout: float) -> Path:
    with replaced_whole(path, encoding="utf-8") as f:
        f.write(feedback_markdown(row, timeout))
    return path


def feedback_markdown(row: Row, timeout: float) -> str:
    """The learner's feedback, in the submission's language: score, each exercise's message
    and hint, what happened."""
    with i18n.using(row.submission.language):
        return _feedback_markdown(row, timeout)


def _feedback_markdown(row: Row, timeout: float) -> str:
    """The feedback as Markdown: the grader's sentences as they are, every text that holds
    a learner's (a name, a message, an error) through escape.markdown or code_block."""
    text, sub = FEEDBACK, row.submission
    out = [markdown_fill(text["title"], name=sub.name), ""]
    if sub.course_copy is not None:
        solved, same = sub.course_copy
        out += [markdown_fill(text["course_same" if same else "course_copy"], name=solved), ""]
    if row.status is Status.INVALID:
        out += [text["invalid"], "", markdown(sub.problem or ""), ""]
        return "\n".join(out)
    out += [
        text["score"].format(
            lesson=sub.lesson,
            points=row.points,
            max_points=row.max_points,
            status=text["status_word"][row.status.value],
            seconds=row.seconds,
            limit=timeout,
        ),
        "",
        text["status"][row.status.value],
        "",
        text["table"],
        "| --- | --- | --- |",
    ]
    names = status_names()
    for ex in row.exercises:
        out.append(
            f"| {ex.id} `{ex.name}` | {ex.points} / {ex.max} | "
            f"{mark(ex.status)} {names[ex.status]} |"
        )
    out.append("")
    for ex in row.exercises:
        out += [f"## {ex.id} `{ex.name}`: {ex.points} / {ex.max}", ""]
        if ex.message:
            out += [markdown(ex.message), ""]
        if ex.hint:
            out += [markdown(text["hint"].format(hint=ex.hint)), ""]
    out += _happened(row)
    if row.run_seconds is not None and row.score_seconds is not None:
        times = text["times"].format(run=row.run_seconds, checks=row.score_seconds)
        out += ["---", times, ""]
    return "\n".join(out)


def _happened(row: Row) -> list[str]:
    """What happened (a timeout, a crash, a limit), then the cells that raised (5 at most)."""
    text, out = FEEDBACK, []
    happened = [e for e in row.events if e.kind != "cell_error"]
    errors = [e for e in row.events if e.kind == "cell_error"]
    if happened:
        out += [text["happened"], ""]
        for e in happened:
            out += [markdown(e.text), ""]
            if e.detail:
                out += [code_block(e.detail), ""]
    if errors:
        out += [text["cell_errors"], ""]
        for e in errors[:5]:
            out += [markdown(e.text), "", code_block(e.detail), ""]
        if len(errors) > 5:
            out += [text["more_errors"].format(count=len(errors) - 5), ""]
    return out
