"""How long a lesson's core path takes: the estimate at the top of every notebook (authors).

`python -m ddp_helpers pace` prints each lesson's estimate, item by item.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..stubs import BEGIN, END

# The rates behind the estimate, for a learner new to distributed training, calibrated on an
# expert's read of the four lessons as a newcomer would take them (at commit 52103bf: 22-26,
# 25-30, 28-35 and 28-33 minutes; this estimate gave 26.1, 31.0, 29.2 and 29.7 there, each
# within 15 % of the midpoint), each rate with its reason (docs/learners.md says the same):
# - technical prose read to be understood: 150 words a minute; Japanese prose 400 characters a
#   minute (kana, kanji and their punctuation; native readers take in 400-600 a minute of
#   general text, technical text sits at the low end), its Latin words (API names) at 150;
# - code read to know what each line does on each rank: 10 lines a minute (20 is the pace of
#   skimming code one already knows; a newcomer stops at every call of an unfamiliar API);
# - 5 s per code cell to run it, 3 s per line it prints (at most 20 lines a cell: a long
#   stack is skimmed), a minute per picture (axes, legend and what differs are studied);
# - an exercise: a minute per line of the reference answer, at least a minute (a
#   prediction): new code is recalled and thought out, not copied (copying runs at about
#   40 s a line); then a minute to run its check, read the verdict and, on average, fix
#   something once and run it again. An exercise whose `minutes` is set (an Exercise
#   attribute) replaces the writing part of that, and says why;
# - an earlier lesson's answer pasted in again: half a minute (find it, copy, paste).
WORDS_PER_MINUTE = 150
JAPANESE_CHARACTERS_PER_MINUTE = 400
CODE_LINES_PER_MINUTE = 10
SECONDS_PER_CODE_CELL = 5
SECONDS_PER_OUTPUT_LINE = 3
OUTPUT_LINES_READ = 20
SECONDS_PER_PICTURE = 60
MINUTES_PER_ANSWER_LINE = 1.0
MINUTES_PER_CHECK = 1.0
MINUTES_PER_PASTED_ANSWER = 0.5
TARGET_MINUTES = 25

# A translation keeps the English words in its heading: "## さらに先へ (Going further)".
GOING_FURTHER = re.compile(r"^## (?:.*\()?Going further", re.M)
STATED = re.compile(
    r"\*(?:Core path: about (\d+) minutes of reading and running, (\d+) exercises?\."
    r"|コアパス: 読んで実行して約 (\d+) 分、演習 (\d+) 問。)"
)
_WORD = re.compile(r"[A-Za-z0-9_'`.-]+")
_JAPANESE = re.compile(r"[\u3000-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uff00-\uffef]")


def _code_lines(lines) -> int:
    return sum(1 for line in lines if line.strip() and not line.strip().startswith("#"))


@dataclass(frozen=True)
class CorePath:
    """What a learner reads, runs and writes before the optional "Going further" section."""

    words: int
    code_cells: int
    code_lines: int
    output_lines: int
    pictures: int
    exercise_minutes: tuple[float, ...] = field(default=())  # one entry per exercise
    pasted: int = 0
    japanese_characters: int = 0

    @property
    def exercises(self) -> int:
        return len(self.exercise_minutes)

    def parts(self) -> dict[str, float]:
        """Minutes spent on each kind of work."""
        return {
            "prose": self.words / WORDS_PER_MINUTE
            + self.japanese_characters / JAPANESE_CHARACTERS_PER_MINUTE,
            "code": self.code_lines / CODE_LINES_PER_MINUTE,
            "running": self.code_cells * SECONDS_PER_CODE_CELL / 60,
            "outputs": (
                self.output_lines * SECONDS_PER_OUTPUT_LINE + self.pictures * SECONDS_PER_PICTURE
            )
            / 60,
            "exercises": sum(self.exercise_minutes) + self.pasted * MINUTES_PER_PASTED_ANSWER,
        }

    @property
    def minutes(self) -> float:
        return sum(self.parts().values())

    @property
    def rounded(self) -> int:
        return int(self.minutes + 0.5)


def _outputs(cell) -> tuple[int, int]:
    lines = pictures = 0
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            lines += len(out.get("text", "").rstrip("\n").splitlines())
        elif out.get("output_type") == "error":
            lines += len(out.get("traceback", []))
        elif "image/png" in out.get("data", {}) or "image/svg+xml" in out.get("data", {}):
            pictures += 1
        elif "text/plain" in out.get("data", {}):
            lines += len(out["data"]["text/plain"].splitlines())
    return min(lines, OUTPUT_LINES_READ), pictures


def _answer_minutes(lines: int) -> float:
    """Writing an answer of `lines` lines, then checking it."""
    return max(1.0, lines * MINUTES_PER_ANSWER_LINE) + MINUTES_PER_CHECK


def core_path(solution, exercises=()) -> CorePath:
    """Count a *solution* notebook up to "## Going further".

    The solution holds what the estimate needs: the answers (whose length is the work of
    each exercise) and the outputs a learner reads. `exercises`: the lesson's Exercise
    objects, in order, for those whose `minutes` is set.
    """
    words = characters = cells = code = outputs = pictures = pasted = 0
    answers: list[float] = []
    for cell in solution.cells:
        if cell.cell_type == "markdown":
            head = GOING_FURTHER.split(cell.source)[0]
            characters += len(_JAPANESE.findall(head))
            words += len(_WORD.findall(_JAPANESE.sub(" ", head)))
            if head != cell.source:
                break
            continue
        if cell.cell_type != "code" or "solution-only" in cell.metadata.get("tags", []):
            continue
        cells += 1
        shown, region, earlier, continued, own = [], None, None, None, []
        for line in cell.source.splitlines():
            begin = BEGIN.match(line)
            if begin:
                region, earlier, continued = [], begin.group(2), begin.group(3)
            elif END.match(line) and region is not None:
                if earlier:
                    pasted += 1
                elif continued and answers:  # more of the answer before it
                    own += region
                    answers[-1] = _answer_minutes(_code_lines(own))
                else:
                    own = region
                    answers.append(_answer_minutes(_code_lines(region)))
                region = None
            elif region is not None:
                region.append(line)
            else:
                shown.append(line)
        code += _code_lines(shown)
        lines, pics = _outputs(cell)
        outputs, pictures = outputs + lines, pictures + pics
    for i, ex in enumerate(list(exercises)[: len(answers)]):
        if getattr(ex, "minutes", None) is not None:
            answers[i] = float(ex.minutes) + MINUTES_PER_CHECK
    return CorePath(words, cells, code, outputs, pictures, tuple(answers), pasted, characters)


def stated(lesson) -> tuple[int, int] | None:
    """(minutes, exercises) as the notebook's first cell states them, or None."""
    m = STATED.search(lesson.cells[0].source) if lesson.cells else None
    if not m:
        return None
    minutes, count = m.group(1) or m.group(3), m.group(2) or m.group(4)
    return int(minutes), int(count)


def lesson_core_path(lesson: str) -> CorePath:
    """The core path of lesson "01", "02", ... counted on its solution notebook."""
    from ..exercises import exercises_of, notebook_name
    from ..nbformat_quick import nbformat as _nbformat
    from ..paths import ROOT

    nb = _nbformat().read(ROOT / "solutions" / notebook_name(lesson), as_version=4)
    return core_path(nb, exercises_of(lesson))


def main() -> None:
    """Print each lesson's estimate and what it is made of."""
    from ..exercises import LESSONS

    for lesson in LESSONS:
        path = lesson_core_path(lesson)
        parts = ", ".join(f"{k} {v:.1f}" for k, v in path.parts().items())
        answers = " + ".join(f"{m:.1f}" for m in path.exercise_minutes)
        print(
            f"{lesson}: {path.minutes:.1f} min (target {TARGET_MINUTES}) = {parts}; "
            f"exercises {answers or '-'}" + (f", {path.pasted} pasted" if path.pasted else "")
        )


if __name__ == "__main__":
    main()
