"""The grader's own words, one leaf below every role of the grader: its mistakes (the check
stopped, died, or said what the grader does not accept; the answer missing or unloadable),
each with the title the class report lists it under, and what the learner reads of a
grading (the feedback file, Gradescope's results): the worker writes with the first, the
outputs read both, and neither imports the other's role for them."""

from __future__ import annotations

from ..i18n import messages

# The grader's own mistakes (keys as in the exercises' tables: a message under its key, a
# title for the class report under f"{key}.title"; "missing" is the exercises' key too).
GRADER = messages(
    "grading.scorer",
    {
        "check_timeout": (
            "Checking this answer did not finish within {limit:g} s (an endless loop, or a "
            "rank waiting for one that never comes?), so it was stopped."
        ),
        "check_timeout.title": "its check was stopped at the time limit",
        "check_died": "Checking this answer ended the grader's process ({how}).",
        "check_died.title": "its check ended the grader's process",
        "missing": "`{name}` is not defined in this notebook (was its cell run, or renamed?).",
        "unsendable": "`{name}` could not be taken out of the notebook: {error}",
        "unsendable.title": "could not be taken out of the notebook",
        "unloadable": "`{name}` could not be loaded by the grader: {error}",
        "unloadable.title": "could not be loaded by the grader",
        "too_big": "the notebook's answers take {size} bytes, over the {limit} the grader reads",
        "malformed": "the file of answers was not the one the grader writes",
        "unreadable": "the grader could not read the notebook's saved answers ({error})",
        "check_bad_line": (
            "The grader's check process said something the grader does not accept ({why}); "
            "this exercise was not scored. Either the grader has a bug, or code of this "
            "notebook wrote into the grader's own channel (which only a grading without the "
            "sandbox lets it reach): tell your instructor."
        ),
        "check_bad_line.title": "its check said something the grader does not accept",
        "not_scored.title": "not scored: the grader failed on the submission",
    },
)
# The keys of the grader's own mistakes, beyond those of each exercise (Exercise.mistake_keys).
GRADER_KEYS = frozenset(
    ["check_timeout", "check_died", "check_bad_line", "missing", "unsendable", "unloadable"]
)


def text(key: str, /, **fields) -> str:
    """The grader's own message or mistake title under `key`, in the current language."""
    return GRADER[key].format(**fields)


# What the learner reads (the feedback file, Gradescope): in the submission's language.
FEEDBACK = messages(
    "grading.feedback",
    {
        "title": "# Feedback: `{name}`",
        "invalid": "**Status: invalid.** This file could not be graded.",
        "score": (
            "Lesson {lesson} · **{points} of {max_points} points** · status **{status}** · "
            "graded in {seconds:.1f} s (limit {limit:g} s for the notebook)"
        ),
        "status": {
            "ok": "The notebook ran to its end.",
            "timeout": (
                "The notebook, or one of its answers, ran past the time limit and was stopped."
            ),
            "error": "The notebook's kernel, or the grader's process running an answer, died.",
        },
        "status_word": {"ok": "ok", "timeout": "timeout", "error": "error", "invalid": "invalid"},
        "table": "| exercise | points | result |",
        "hint": "💡 Hint: {hint}",
        "happened": "## What happened",
        "cell_errors": "## Cells that raised an error",
        "more_errors": "(and {count} more)",
        "times": "Times: notebook {run:.1f} s, checks {checks:.1f} s.",
        "course_same": (
            "This file is the course's solved notebook `{name}` itself (the same file under "
            "another name): it is graded as any copy of it would be."
        ),
        "course_copy": (
            "This file is a copy, byte for byte, of the course's solved notebook `{name}`: it "
            "is graded as any copy of it would be."
        ),
    },
)
