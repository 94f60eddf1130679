"""How long a lesson takes: its core path, and each *Going further* section (authors).

`python -m ddp_helpers pace` prints each lesson's estimate, item by item; `pace --write`
states them in the notebooks (the lesson's top, the headings of Going further) in both
editions, each counted in its own language; tests hold the stated times to the count.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from ..exercises import LESSONS, exercises_of, notebook_name
from ..nbformat_quick import nbformat as _nbformat
from ..paths import ROOT
from ..stubs import Regions

# The rates behind the estimate, for a learner new to distributed training who knows basic
# PyTorch. Calibrated on an outside read of the four lessons at commit a5e9372, which put
# each core path at 27-31, 25-30, 29-38 and 25-32 minutes (midpoints 29, 27.5, 33.5, 28.5);
# these rates give 30.1, 29.1, 30.5 and 29.1 there (+4 %, +6 %, -9 %, +2 %), with the
# capstone at 12 minutes of writing. The previous rates (150 words a minute, a minute a
# picture, a minute an answer line and a check, half a minute a pasted answer) gave 24.3,
# 23.2, 24.6 and 22.8: 16-27 % low. Each rate with its reason (docs/learners.md says the
# same):
# - technical prose read to be understood: 120 words a minute (dense text naming APIs and
#   conditions, often read twice); Japanese prose 320 characters a minute, in the same
#   proportion to the 400 of general reading, its Latin words (API names) at 120;
# - code read to know what each line does on each rank: 10 lines a minute (20 is the pace of
#   skimming code one already knows; a newcomer stops at every call of an unfamiliar API);
# - 5 s per code cell to run it, 3 s per line it prints (at most 20 lines a cell: a long
#   stack is skimmed), a minute and a half per picture (axes, legend and what differs are
#   studied, then set against the prose);
# - an exercise: 1.3 minutes per line of the reference answer, at least 1.3 (a prediction):
#   new code is recalled and thought out, not copied (copying runs at about 40 s a line);
#   then a minute and a half to run its check, read the verdict and, on average, fix
#   something once and run it again. The outside read timed items too: shard 6-8 minutes
#   (this gives 5.4), setup 8-12 (10.6), params_in_sync 10-14 (10.6), the capstone 12-18
#   (13.5). An exercise whose `minutes` is set (an Exercise attribute) replaces the
#   writing part of that, and says why;
# - an earlier lesson's answer pasted in again: a minute (find it, copy, paste, run it).
WORDS_PER_MINUTE = 120
JAPANESE_CHARACTERS_PER_MINUTE = 320
CODE_LINES_PER_MINUTE = 10
SECONDS_PER_CODE_CELL = 5
SECONDS_PER_OUTPUT_LINE = 3
OUTPUT_LINES_READ = 20
SECONDS_PER_PICTURE = 90
MINUTES_PER_ANSWER_LINE = 1.3
MINUTES_PER_CHECK = 1.5
MINUTES_PER_PASTED_ANSWER = 1.0
TARGET_MINUTES = 30  # a core path's most

# Where the core path ends, in each edition: "## Going further (optional)", "## さらに先へ（任意）".
GOING_FURTHER = re.compile(r"^## (?:Going further|さらに先へ)", re.M)
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
    return max(1, lines) * MINUTES_PER_ANSWER_LINE + MINUTES_PER_CHECK


# A section of Going further: a "###" heading that is not an exercise's (an exercise belongs
# to the section it is in). Its heading states its time, after an anchor line the lesson's
# contents link to.
SECTION = re.compile(r"^### (?!Exercises? |演習)(?P<title>.+?)\s*$")
TIME_SUFFIX = re.compile(r"\s*(?:\(about \d+ min\)|（約 \d+ 分）)$")
ANCHOR = re.compile(r'^<a id="further-[\w-]+"></a>$')


@dataclass
class _Tally:
    """What one part of a notebook holds, counted as it is read."""

    words: int = 0
    characters: int = 0
    cells: int = 0
    code: int = 0
    outputs: int = 0
    pictures: int = 0
    pasted: int = 0
    answers: list = field(default_factory=list)  # [index of the answer in the notebook, lines]

    def read(self, text: str) -> None:
        # What the times themselves take (the lesson's top, its contents, the anchors) is
        # glanced at, not studied: not counted, so that stating a time does not move it.
        text = TOP.sub("", text)
        text = "\n".join(line for line in text.splitlines() if not ANCHOR.match(line))
        self.characters += len(_JAPANESE.findall(text))
        self.words += len(_WORD.findall(_JAPANESE.sub(" ", text)))

    def path(self, exercises) -> CorePath:
        minutes = []
        for index, lines in self.answers:
            own = getattr(exercises[index], "minutes", None) if index < len(exercises) else None
            minutes.append(
                float(own) + MINUTES_PER_CHECK if own is not None else _answer_minutes(lines)
            )
        return CorePath(
            self.words, self.cells, self.code, self.outputs, self.pictures, tuple(minutes),
            self.pasted, self.characters,
        )  # fmt: skip


@dataclass(frozen=True)
class Section:
    """A section of Going further: its title (its heading without the time), the anchor the
    lesson's contents link to, and what it holds."""

    title: str
    anchor: str
    cell: str
    path: CorePath


@dataclass(frozen=True)
class Counted:
    """A lesson counted: its core path, the text of Going further before its first section,
    and each section."""

    core: CorePath
    intro: CorePath
    sections: tuple[Section, ...]

    @property
    def further_minutes(self) -> float:
        return self.intro.minutes + sum(s.path.minutes for s in self.sections)

    @property
    def further_rounded(self) -> int:
        """The total stated: Going further's minutes (the text before its first section
        included) rounded half up, or, where the sections' minimum of a minute each comes to
        more, that. The sections' stated times add up to it."""
        least = sum(max(1, int(s.path.minutes)) for s in self.sections)
        return max(_rounded(self.further_minutes), least)

    @property
    def section_minutes(self) -> tuple[int, ...]:
        """Each section's stated minutes, adding up to `further_rounded` (largest-remainder
        rounding): each section its whole minutes, at least one, then the minutes left one
        each to the sections with the largest remainders; so the text before the first
        section, read with them, is counted in, and each stays within a minute of its
        count."""
        return _apportioned([s.path.minutes for s in self.sections], self.further_rounded)


def _code_cell(cell, tally: _Tally, regions: Regions) -> None:
    """Count a code cell into `tally`: its shown lines, and each answer's lines by region
    (stubs.Regions: a continued region adds to the answer before it, a pasted one is
    counted apart)."""
    tally.cells += 1
    shown, own = [], []
    for piece in regions.walk(cell.source):
        if isinstance(piece, str):
            shown.append(piece)
        elif piece.pasted:
            tally.pasted += 1
        elif piece.continued and tally.answers:  # more of the answer before it
            own += piece.lines
            tally.answers[-1][1] = _code_lines(own)
        else:
            own = list(piece.lines)
            tally.answers.append([regions.count - 1, _code_lines(own)])
    tally.code += _code_lines(shown)
    lines, pictures = _outputs(cell)
    tally.outputs, tally.pictures = tally.outputs + lines, tally.pictures + pictures


def count(solution, exercises=()) -> Counted:
    """Count a *solution* notebook: its core path (up to "## Going further"), then Going
    further, section by section.

    The solution holds what the estimate needs: the answers (whose length is the work of
    each exercise) and the outputs a learner reads. `exercises`: the lesson's Exercise
    objects, in order, for those whose `minutes` is set.
    """
    exercises = list(exercises)
    core, intro = _Tally(), _Tally()
    sections: list[tuple[str, str, str, _Tally]] = []
    current, further, regions = core, False, Regions("")  # the answers' order is what counts
    for cell in solution.cells:
        if cell.cell_type == "markdown":
            text = cell.source
            if not further:
                parts = GOING_FURTHER.split(text, maxsplit=1)
                current.read(parts[0])
                if len(parts) == 1:
                    continue
                further, current = True, intro
                text = text[len(parts[0]) :]
            lines: list[str] = []
            for line in text.splitlines():
                heading = SECTION.match(line)
                if heading:
                    current.read("\n".join(lines))
                    lines, current = [], _Tally()
                    title = TIME_SUFFIX.sub("", heading["title"])
                    same_cell = sum(1 for _, _, c, _ in sections if c == cell.get("id"))
                    anchor = f"further-{cell.get('id')}" + (f"-{same_cell}" if same_cell else "")
                    sections.append((title, anchor, cell.get("id"), current))
                lines.append(TIME_SUFFIX.sub("", line) if heading else line)
            current.read("\n".join(lines))
            continue
        if cell.cell_type != "code" or "solution-only" in cell.metadata.get("tags", []):
            continue
        _code_cell(cell, current, regions)
    return Counted(
        core.path(exercises),
        intro.path(exercises),
        tuple(Section(t, a, c, tally.path(exercises)) for t, a, c, tally in sections),
    )


def core_path(solution, exercises=()) -> CorePath:
    """The core path of a *solution* notebook: what comes before "## Going further"."""
    return count(solution, exercises).core


def stated(lesson) -> tuple[int, int] | None:
    """(minutes, exercises) as the notebook's first cell states them, or None."""
    m = STATED.search(lesson.cells[0].source) if lesson.cells else None
    if not m:
        return None
    minutes, count = m.group(1) or m.group(3), m.group(2) or m.group(4)
    return int(minutes), int(count)


def lesson_core_path(lesson: str) -> CorePath:
    """The core path of lesson "01", "02", ... counted on its solution notebook."""
    return lesson_counted(lesson).core


def lesson_counted(lesson: str, lang: str = "en") -> Counted:
    """Lesson "01", "02", ... counted on its solution notebook in `lang`."""
    folder = ROOT / "solutions" / ("" if lang == "en" else lang)
    nb = _nbformat().read(folder / notebook_name(lesson), as_version=4)
    return count(nb, exercises_of(lesson))


# ---------------------------------------------------------------- the times, stated

# The top of a lesson: the core path's time and exercises, then Going further's, then its
# sections, each linked to its heading. STATED above reads the first sentence back.
TOP = re.compile(
    r"\*(?:Core path: about|コアパス: 読んで実行して約) [^*]*\*[ \t]*\n"
    r"(?:\n?- \[[^\n]*\]\(#further-[^\n]*(?:\n|\Z))*"
)
FURTHER_STATED = re.compile(
    r"Going further \(optional\):\s+about (\d+) minutes more|さらに先へ（任意）: さらに約 (\d+) 分"
)
WORDING = {
    "en": {
        "top": (
            "*Core path: about {core} minutes of reading and running, {exercises} "
            "{exercise_word}.\nGoing further (optional): about {further} minutes more{more}.*\n"
        ),
        "exercise": "exercise",
        "exercises": "exercises",
        "in_sections": ", in the sections below",
        "entry": "- [{title}](#{anchor}), about {minutes} min\n",
        "suffix": " (about {minutes} min)",
    },
    "ja": {
        "top": (
            "*コアパス: 読んで実行して約 {core} 分、演習 {exercises} 問。さらに先へ（任意）: "
            "さらに約 {further} 分{more}。*\n"
        ),
        "exercise": "",
        "exercises": "",
        "in_sections": "、以下の節に分かれています",
        "entry": "- [{title}](#{anchor})（約 {minutes} 分）\n",
        "suffix": "（約 {minutes} 分）",
    },
}


def _rounded(minutes: float) -> int:
    """Whole minutes, half up (Python's round() takes a half to the even neighbour), at
    least one."""
    return max(1, int(minutes + 0.5))


def _apportioned(minutes: list[float], total: int) -> tuple[int, ...]:
    """Whole minutes for each of `minutes`, adding up to `total` (or to the minimums, where
    they come to more): each its whole minutes, at least one, then the minutes left one
    each to the largest remainders (the earlier item on a tie; one raised to the minimum
    has none), round again if more are left than items."""
    counts = [max(1, int(m)) for m in minutes]
    by_remainder = sorted(range(len(minutes)), key=lambda i: (counts[i] - minutes[i], i))
    left = total - sum(counts)
    while left > 0 and by_remainder:
        for i in by_remainder[:left]:
            counts[i] += 1
        left = total - sum(counts)
    return tuple(counts)


def stated_top(counted: Counted, lang: str) -> str:
    """The lesson's top statement and its contents, as `counted` gives them."""
    words = WORDING[lang]
    n = counted.core.exercises
    top = words["top"].format(
        core=counted.core.rounded,
        exercises=n,
        exercise_word=words["exercise" if n == 1 else "exercises"],
        further=counted.further_rounded,
        more=words["in_sections"] if counted.sections else "",
    )
    entries = [
        words["entry"].format(title=s.title, anchor=s.anchor, minutes=minutes)
        for s, minutes in zip(counted.sections, counted.section_minutes, strict=True)
    ]
    return top + ("\n" + "".join(entries) if entries else "")


def _headed(text: str, sections: list[tuple[Section, int]], lang: str) -> str:
    """`text` with each section heading stating its time (the minutes paired with it),
    after its anchor line."""
    lines, out, skip_blank, k = text.splitlines(), [], False, 0
    for line in lines:
        if ANCHOR.match(line):
            skip_blank = True  # the anchor's own blank line goes with it
            continue
        if skip_blank and not line.strip():
            skip_blank = False
            continue
        skip_blank = False
        heading = SECTION.match(line)
        if heading and k < len(sections):
            (section, minutes), k = sections[k], k + 1
            if out and out[-1].strip():
                out.append("")
            title = TIME_SUFFIX.sub("", heading["title"])
            suffix = WORDING[lang]["suffix"].format(minutes=minutes)
            out += [f'<a id="{section.anchor}"></a>', "", f"### {title}{suffix}"]
            continue
        out.append(line)
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


def stated_texts(nb, counted: Counted, lang: str) -> dict[str, str]:
    """{cell id: its markdown as it should read} for the cells that state a time: the first
    cell, and every cell with a Going further section's heading."""
    texts = {}
    first = nb.cells[0]
    if TOP.search(first.source):
        texts[first.get("id")] = TOP.sub(lambda _: stated_top(counted, lang), first.source, count=1)
    by_cell: dict[str, list[tuple[Section, int]]] = {}
    for section, minutes in zip(counted.sections, counted.section_minutes, strict=True):
        by_cell.setdefault(section.cell, []).append((section, minutes))
    for cell in nb.cells:
        if cell.get("id") in by_cell:
            source = texts.get(cell.get("id"), cell.source)
            texts[cell.get("id")] = _headed(source, by_cell[cell.get("id")], lang)
    return texts


def _restate(entries: dict, english, stated: dict, old_hashes: dict) -> list[str]:
    """Put the Japanese stated times into the translation `entries`; a translation that
    was up to date before its English cell's times changed gets the new hash (a stale one
    stays stale). The cells whose text changed."""
    from .translations import text_hash

    changed = []
    for cell in english.cells:
        entry = entries.get(cell.get("id"))
        if entry is None or cell.cell_type != "markdown":  # times are stated in markdown
            continue
        text = stated.get(cell.get("id"), entry["text"])
        new_hash = text_hash(cell.source)
        if text != entry["text"]:
            changed.append(cell.get("id"))
            entry["text"] = text
        if entry["translates"] == old_hashes[cell.get("id")]:
            entry["translates"] = new_hash
    return changed


def write(root=None, check: bool = False, lessons=None) -> list[str]:
    """State every time in the solutions (`check`: change nothing): the lesson's top and
    each Going further heading, the English from the English count, the Japanese
    translation (i18n/ja) from the Japanese one; `lessons` ("03", ...): those only. The
    cells that were (or would be) changed, as "NN_name.ipynb cell ID (lang)"."""
    from .build import add_language_cell
    from .translations import make_edition, text_hash, translation_path

    nbformat = _nbformat()
    root = root or ROOT
    changed: list[str] = []
    for lesson in lessons or LESSONS:
        name, exercises = notebook_name(lesson), exercises_of(lesson)
        for _ in range(4):  # a stated time is text too: count again until nothing moves
            moved = False
            path = root / "solutions" / name
            english = nbformat.read(path, as_version=4)
            old_hashes = {c.get("id"): text_hash(c.source) for c in english.cells}
            for cell_id, text in stated_texts(english, count(english, exercises), "en").items():
                cell = next(c for c in english.cells if c.get("id") == cell_id)
                if cell.source != text:
                    cell.source, moved = text, True
                    changed.append(f"{name} cell {cell_id} (en)")
            if moved and not check:
                nbformat.write(english, path)
            jpath = translation_path(root, "ja", name)
            entries = json.loads(jpath.read_text(encoding="utf-8"))
            before = json.loads(json.dumps(entries))
            on_disk = root / "solutions" / "ja" / name
            previous = nbformat.read(on_disk, as_version=4) if on_disk.exists() else None
            japanese = make_edition(english, name, "ja", root, previous).notebook
            add_language_cell(japanese, name, "ja")  # as `build` writes it: counted too
            stated = stated_texts(japanese, count(japanese, exercises), "ja")
            ja_changed = _restate(entries, english, stated, old_hashes)
            changed += [f"{name} cell {cell_id} (ja)" for cell_id in ja_changed]
            moved = moved or bool(ja_changed) or entries != before
            if moved and not check:
                jpath.write_text(
                    json.dumps(entries, ensure_ascii=False, indent=1) + "\n", encoding="utf-8"
                )
            if not moved or check:
                break
        else:
            raise RuntimeError(
                f"pace --write: the times stated in {name} still move after 4 passes (a "
                "stated time changes the count it states): state them by hand, or report it"
            )
    return sorted(set(changed))


def main(argv: list[str] | None = None) -> None:
    """Print each lesson's estimate and what it is made of, with the whole minutes the
    lesson states (in brackets); `--write` states the times; `--only=NN`: that lesson."""
    argv = argv or []
    only = [a.removeprefix("--only=") for a in argv if a.startswith("--only=")] or None
    if "--write" in argv:
        for line in write(lessons=only):
            print(f"stated the times in {line}")
        return
    for lesson in only or LESSONS:
        counted = lesson_counted(lesson)
        path = counted.core
        parts = ", ".join(f"{k} {v:.1f}" for k, v in path.parts().items())
        answers = " + ".join(f"{m:.1f}" for m in path.exercise_minutes)
        print(
            f"{lesson}: {path.minutes:.1f} min [{path.rounded}] (at most {TARGET_MINUTES}) = "
            f"{parts}; exercises {answers or '-'}"
            + (f", {path.pasted} pasted" if path.pasted else "")
        )
        sections = "; ".join(
            f"{s.title} {s.path.minutes:.1f} [{minutes}]"
            for s, minutes in zip(counted.sections, counted.section_minutes, strict=True)
        )
        print(
            f"    going further: {counted.further_minutes:.1f} min [{counted.further_rounded}]"
            + (f" = {sections}" if sections else "")
        )


if __name__ == "__main__":
    main()
