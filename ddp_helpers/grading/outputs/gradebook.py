"""`python -m ddp_helpers merge`: the grades put into an LMS's gradebook export.

Reads the gradebook the LMS exported (Canvas: Grades > Export), finds each learner by a
column of it (`--key`, e.g. "SIS Login ID") equal to the `student` of grades.csv, and
writes the export again with the points in one column (`--column`; made at the end if
the export has none), ready to import. Nothing is guessed: a student graded twice for
the lesson, or a grade whose student is not in the export, is reported, and the first
stops the merge.
"""

from __future__ import annotations

import csv

from ...files import replaced_whole

INSTRUCTOR_TEXT = {
    "no_key": (
        "The gradebook {path} has no column {key!r}; its columns are: {columns}. Give "
        "--key the column that holds what grades.csv has under `student`."
    ),
    "no_student_column": (
        "{path} has no `student` column: grade again with this version of the grader "
        "(and --student-from if the learners' names are in the file names)."
    ),
    "twice": (
        "{student!r} has {count} graded submissions{lesson}: {names}. Keep one (or give "
        "--lesson) and merge again; nothing was written."
    ),
    "unmatched": "warning: not in the gradebook, so not merged: {students}",
    "empty": "warning: {count} graded submission(s) have no student: {names}",
    "wrote": "wrote {out}: {merged} learners' points in column {column!r}",
}


class MergeError(Exception):
    """The merge cannot be done as asked; the message says why and what to do."""


def merge(
    grades: str,
    gradebook: str,
    key: str,
    column: str,
    out: str,
    lesson: str | None = None,
    stream=None,
) -> int:
    """Write out: gradebook with the points of grades in column. Returns learners merged."""
    by_student, nameless = _graded_by_student(grades, lesson)
    header, body = _read_gradebook(gradebook, key, column)
    k, c = header.index(key), header.index(column)
    merged = set()
    for row in body:
        row += [""] * (len(header) - len(row))
        found = by_student.get(row[k].strip().casefold())
        if found and row[k].strip():
            row[c] = found[0]["points"]
            merged.add(row[k].strip().casefold())
    with replaced_whole(out, newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(body)
    missing = [rows[0]["student"] for s, rows in by_student.items() if s not in merged]
    if stream is not None:
        if missing:
            print(
                INSTRUCTOR_TEXT["unmatched"].format(students=", ".join(sorted(missing))),
                file=stream,
            )
        if nameless:
            print(
                INSTRUCTOR_TEXT["empty"].format(count=len(nameless), names=", ".join(nameless)),
                file=stream,
            )
        print(
            INSTRUCTOR_TEXT["wrote"].format(out=out, merged=len(merged), column=column), file=stream
        )
    return len(merged)


def _graded_by_student(grades: str, lesson: str | None) -> tuple[dict, list[str]]:
    """grades.csv's rows (of `lesson`) by student, casefolded; the submissions with none.

    A student graded twice is a MergeError: which of the two counts is not for us to guess.
    """
    with open(grades, newline="", encoding="utf-8") as f:
        graded = list(csv.DictReader(f))
    if graded and "student" not in graded[0]:
        raise MergeError(INSTRUCTOR_TEXT["no_student_column"].format(path=grades))
    if lesson is not None:
        graded = [r for r in graded if r["lesson"] == lesson]
    by_student: dict[str, list[dict]] = {}
    nameless = []
    for row in graded:
        student = row["student"].strip()
        if student:
            by_student.setdefault(student.casefold(), []).append(row)
        else:
            nameless.append(row["submission"])
    for rows in by_student.values():
        if len(rows) > 1:
            raise MergeError(
                INSTRUCTOR_TEXT["twice"].format(
                    student=rows[0]["student"],
                    count=len(rows),
                    lesson=f" of lesson {lesson}" if lesson else "",
                    names=", ".join(r["submission"] for r in rows),
                )
            )
    return by_student, nameless


def _read_gradebook(gradebook: str, key: str, column: str) -> tuple[list[str], list[list[str]]]:
    """The export's header and rows, with `column` added (empty) if it has none."""
    with open(gradebook, newline="", encoding="utf-8-sig") as f:
        reader = csv.reader(f)
        header = next(reader, [])
        body = list(reader)
    if key not in header:
        raise MergeError(
            INSTRUCTOR_TEXT["no_key"].format(path=gradebook, key=key, columns=", ".join(header))
        )
    if column not in header:
        header.append(column)
        body = [row + [""] for row in body]
    return header, body
