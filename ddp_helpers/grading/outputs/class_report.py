"""The class report: what the class got right and wrong, as one static HTML file.

Per exercise, the share of correct, wrong, not attempted, error and missing answers, and
the mistakes counted across the class by their keys (each result carries its mistake's
key; an error's is counted per exception), shown by their titles from the exercise's own
table (or the grader's), so a new check's mistakes appear here without code of their
own. The plots (pass rates, time per submission) are matplotlib PNGs embedded in the
file: it opens offline.
"""

from __future__ import annotations

import base64
import html
import io
import time
from collections import Counter
from functools import cache
from pathlib import Path

from ...exercises import exercises_of
from ...exercises.texts import Texts, status_names
from ...exercises.verdicts import CheckStatus, colour
from ...files import replaced_whole
from ...i18n import messages
from .. import words
from ..results import STATUSES, ExerciseScore, Row, Status
from .escape import printable

OUTCOMES = tuple(CheckStatus)
COLORS = {status: colour(status) for status in CheckStatus}  # verdicts.LOOKS

MESSAGES = messages("grading.class_report", {"title": "Class report"})


# ---------------------------------------------------------------- naming mistakes


@cache
def _texts(lesson: str) -> dict[str, Texts]:
    """Each exercise of a lesson's text, by exercise id."""
    return {ex.id: ex.texts for ex in exercises_of(lesson)}


def title_of(lesson: str, score: ExerciseScore) -> str:
    """The title of an exercise's mistake: its check's, the core's, or the grader's; the
    key itself where none has it, or its fields do not fill it."""
    key = f"{score.mistake}.title"
    texts = _texts(lesson).get(score.id) or Texts()
    try:
        if key in texts:
            return texts.text(key, **score.fields)
        return words.text(key, **score.fields)
    except (KeyError, IndexError, ValueError):
        return str(score.mistake)


# ---------------------------------------------------------------- counting


class Tally:
    """What the class got, counted row by row as rows are settled (the report keeps no
    row's text beyond one example message per mistake): lesson -> exercise column ->
    {outcomes: Counter, mistakes: Counter of (key, title), examples: {(key, title): a
    message}}; and the submissions a row of which could not be counted, by name."""

    def __init__(self):
        self.lessons: dict[str, dict[str, dict]] = {}
        self.broken: list[str] = []

    def add(self, row: Row) -> None:
        if row.status is Status.INVALID:
            return
        try:
            counted = [(ex, self._title(row, ex)) for ex in row.exercises]
        except Exception:  # noqa: BLE001 - a row this report cannot read is named in it
            self.broken.append(row.submission.name)
            return
        for ex, mistake in counted:
            entry = self.lessons.setdefault(row.submission.lesson, {}).setdefault(
                ex.column, {"outcomes": Counter(), "mistakes": Counter(), "examples": {}}
            )
            entry["outcomes"][ex.status] += 1
            if mistake is not None:
                entry["mistakes"][mistake] += 1
                entry["examples"].setdefault(mistake, ex.message)

    @staticmethod
    def _title(row: Row, ex: ExerciseScore) -> tuple[str, str] | None:
        return None if ex.mistake is None else (ex.mistake, title_of(row.submission.lesson, ex))


# ---------------------------------------------------------------- plots


def _png(fig) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def plot_outcomes(counts: dict[str, dict]) -> str:
    """Stacked bars: each exercise's share of each outcome."""
    from matplotlib.figure import Figure

    columns = list(counts)
    fig = Figure(figsize=(7.5, 0.45 * len(columns) + 1.2))
    ax = fig.subplots()
    left = [0.0] * len(columns)
    for outcome in OUTCOMES:
        shares = []
        for column in columns:
            c = counts[column]["outcomes"]
            shares.append(100 * c[outcome] / max(1, sum(c.values())))
        ax.barh(columns, shares, left=left, color=COLORS[outcome], label=status_names()[outcome])
        left = [a + b for a, b in zip(left, shares, strict=True)]
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("% of submissions that ran")
    ax.legend(ncols=5, loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False, fontsize=8)
    return _png(fig)


def plot_times(rows: list[Row], timeout: float) -> str:
    """Each submission's time, sorted: the notebook's run, then its checks; and the limit,
    which is the notebook's."""
    from matplotlib.figure import Figure

    ran = [r for r in rows if r.status is not Status.INVALID and r.run_seconds is not None]
    ran.sort(key=lambda r: r.run_seconds + (r.score_seconds or 0))
    fig = Figure(figsize=(7.5, 3))
    ax = fig.subplots()
    where = range(len(ran))
    run = [r.run_seconds for r in ran]
    ok, failed = COLORS[CheckStatus.CORRECT], COLORS[CheckStatus.ERROR]
    colors = [ok if r.status is Status.OK else failed for r in ran]
    ax.bar(where, run, color=colors, label="notebook (orange: timeout or error)")
    checks = [r.score_seconds or 0 for r in ran]
    ax.bar(where, checks, bottom=run, color="#90a4ae", label="checks")
    ax.axhline(timeout, color="#555", linestyle="--", linewidth=1)
    ax.text(-0.4, timeout, f"notebook limit {timeout:g} s", va="bottom", fontsize=8)
    ax.set_xlabel("submissions, fastest first")
    ax.set_ylabel("seconds")
    ax.set_xticks([])
    ax.legend(loc="upper left", frameon=False, fontsize=8)
    return _png(fig)


# ---------------------------------------------------------------- the page


def _escaped(text) -> str:
    """Text for the page: HTML's specials escaped, control characters shown (printable)."""
    return html.escape(printable(text))


_STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; max-width: 60rem; margin: 2rem auto;
       padding: 0 1rem; color: #222; }
h1 { margin-bottom: 0.2rem; } .meta { color: #666; margin-top: 0; }
table { border-collapse: collapse; margin: 0.8rem 0; } td, th { padding: 0.25rem 0.6rem;
       border-bottom: 1px solid #ddd; text-align: left; } td.n { text-align: right; }
.bar { display: inline-block; height: 0.7rem; vertical-align: middle; }
ul.mistakes li { margin: 0.2rem 0; } details { color: #555; font-size: 0.9em; }
pre { white-space: pre-wrap; background: #f6f6f6; padding: 0.5rem; }
img { max-width: 100%; }
"""


def render(rows: list[Row], timeout: float, wall: float, counted: Tally) -> str:
    """The report's HTML; `counted`: the rows' Tally, kept as they came."""
    e = _escaped
    counts = Counter(r.status.value for r in rows)
    ran = [r for r in rows if r.status is not Status.INVALID]
    lessons = sorted({r.submission.lesson for r in ran})
    tallied = counted.lessons
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{MESSAGES['title']}: lesson {', '.join(lessons) or '-'}</title>",
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>{MESSAGES['title']}</h1>",
        '<p class="meta">'
        + e(
            f"{len(rows)} submissions · "
            + " · ".join(f"{s} {counts.get(s, 0)}" for s in STATUSES)
            + f" · graded in {wall:.0f} s on {time.strftime('%Y-%m-%d %H:%M')}"
        )
        + "</p>",
    ]
    for lesson in lessons:
        n = sum(1 for r in ran if r.submission.lesson == lesson)
        out += _lesson_section(lesson, n, tallied.get(lesson, {}))
    if ran:
        out.append("<h2>Time per submission</h2>")
        out.append(
            f'<img alt="Seconds each submission took to grade" src="{plot_times(rows, timeout)}">'
        )
    out += _course_copies(rows)
    out += _submissions_table(rows)
    if counted.broken:
        out.append("<h2>Not counted</h2><p>This report could not count these rows:</p><ul>")
        out += [f"<li>{e(name)}</li>" for name in counted.broken]
        out.append("</ul>")
    out.append("</body></html>")
    return "\n".join(out)


def _lesson_section(lesson: str, n: int, table: dict) -> list[str]:
    """A lesson's plot and table of outcomes per exercise, then each exercise's mistakes."""
    e = _escaped
    out = [f"<h2>Lesson {e(lesson)} ({n} submission{'' if n == 1 else 's'} that ran)</h2>"]
    out.append(
        f'<img alt="Share of each outcome per exercise, lesson {e(lesson)}" '
        f'src="{plot_outcomes(table)}">'
    )
    out.append("<table><tr><th>exercise</th>")
    out += [f"<th>{status_names()[o]}</th>" for o in OUTCOMES]
    out.append("</tr>")
    for column, entry in table.items():
        total = max(1, sum(entry["outcomes"].values()))
        out.append(f"<tr><td>{e(column)}</td>")
        for o in OUTCOMES:
            k = entry["outcomes"][o]
            out.append(
                f'<td class="n">{k} <span class="bar" style="width:{60 * k / total:.0f}px;'
                f'background:{COLORS[o]}"></span> {100 * k / total:.0f}%</td>'
            )
        out.append("</tr>")
    out.append("</table>")
    for column, entry in table.items():
        if not entry["mistakes"]:
            continue
        total = sum(entry["outcomes"].values())
        out.append(f"<h3>{e(column)}: what went wrong</h3><ul class='mistakes'>")
        for (key, title), k in entry["mistakes"].most_common():
            example = entry["examples"][key, title]
            out.append(
                f'<li data-mistake="{e(key)}"><b>{k} of {total}</b>: {e(title)} '
                f"<code>{e(key)}</code><details><summary>an example"
                f"</summary><pre>{e(example)}</pre></details></li>"
            )
        out.append("</ul>")
    return out


def _course_copies(rows: list[Row]) -> list[str]:
    """The submissions that are one of the course's solved notebooks: the same file (a hard
    link to it) or a copy byte for byte. Graded as such a copy is; named here."""
    copies = [r.submission for r in rows if r.submission.course_copy is not None]
    if not copies:
        return []
    e = _escaped
    out = [
        "<h2>The course's own notebooks</h2><p>These submissions are the course's solved "
        "notebooks, graded as any copy of them is:</p><ul class='course-copies'>"
    ]
    for sub in copies:
        solved, same = sub.course_copy
        how = "the same file (a hard link to it)" if same else "a copy, byte for byte"
        out.append(f"<li>{e(sub.name)}: {how} of <code>{e(solved)}</code></li>")
    out.append("</ul>")
    return out


def _submissions_table(rows: list[Row]) -> list[str]:
    """Every submission with its student, status, points and time."""
    e = _escaped
    out = ["<h2>Submissions</h2><table><tr>"]
    out += [f"<th>{h}</th>" for h in ("student", "submission", "status", "points", "seconds")]
    out.append("</tr>")
    for r in rows:
        points = f"{r.points}/{r.max_points}" if r.max_points is not None else "-"
        cells = (
            r.submission.student,
            r.submission.name,
            r.status.value,
            points,
            f"{r.seconds:.1f}",
        )
        out.append("<tr>" + "".join(f"<td>{e(str(c))}</td>" for c in cells) + "</tr>")
    out.append("</table>")
    return out


def write_report(rows: list[Row], path, timeout: float, wall: float, counted: Tally) -> Path:
    """Write the report (made whole, then moved into place)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with replaced_whole(path, encoding="utf-8") as f:
        f.write(render(rows, timeout, wall, counted))
    return path
