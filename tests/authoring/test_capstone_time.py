"""Lesson 04's capstone says its own time, and that time is what pace counts for it."""

from __future__ import annotations

import re

import nbformat
import pytest

from ddp_helpers.authoring import pace
from ddp_helpers.exercises import exercises_of
from support import ROOT

NAME = "04_sampler_and_checkpoint.ipynb"
SAID = {"en": re.compile(r"\babout (\d+) minutes\b", re.I), "ja": re.compile(r"約 (\d+) 分")}


def _capstone_opening(lang: str) -> str:
    """The capstone's heading and first sentence."""
    folder = ROOT / "solutions" / ("" if lang == "en" else lang)
    nb = nbformat.read(folder / NAME, as_version=4)
    cell = next(
        c for c in nb.cells
        if c.cell_type == "markdown" and re.search(r"^## .*(Exercise|演習) 4\.1\b", c.source, re.M)
    )  # fmt: skip
    text = cell.source[re.search(r"^## ", cell.source, re.M).start() :]
    heading, _, rest = text.partition("\n")
    first = re.split(r"(?<=[.。])\s", rest.strip(), maxsplit=1)[0]
    return heading + "\n" + first


@pytest.mark.parametrize("lang", ["en", "ja"])
def test_the_capstone_says_the_minutes_pace_counts_for_it(lang):
    exercises = exercises_of("04")
    index = next(i for i, e in enumerate(exercises) if e.id == "4.1")
    assert exercises[index].minutes is not None, "the capstone states its own minutes"
    counted = pace.lesson_counted("04", lang).core.exercise_minutes[index]
    said = SAID[lang].findall(_capstone_opening(lang))
    assert said == [str(int(counted + 0.5))], (
        f"the capstone's heading or first sentence ({lang}) should say its time once, "
        f"'about {int(counted + 0.5)} minutes' (pace counts {counted:.1f}): {said}"
    )
