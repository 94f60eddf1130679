"""The core-path estimate: what it counts, and the rates it counts with."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import nbformat
import pytest

from ddp_helpers.authoring import pace
from ddp_helpers.exercises import LESSONS
from support import ROOT


def _notebook():
    v4 = nbformat.v4
    answer = "\n".join(f"    x{i} = {i}" for i in range(15))
    shown = v4.new_code_cell(
        "import torch\n\n# a comment is not read as code\nprint(torch.ones(2))\nplt.plot()"
    )
    shown.outputs = [
        v4.new_output("stream", name="stdout", text="".join(f"line {i}\n" for i in range(30))),
        v4.new_output("display_data", data={"image/png": "iVBOR", "text/plain": "<Figure>"}),
    ]
    return v4.new_notebook(
        cells=[
            v4.new_markdown_cell("one two three " * 50),  # 150 words
            shown,
            v4.new_code_cell(f"def f():\n    # BEGIN SOLUTION\n{answer}\n    # END SOLUTION"),
            v4.new_code_cell("def g():\n    # BEGIN SOLUTION\n    return 1\n    # END SOLUTION"),
            v4.new_code_cell(
                "def setup():\n    # BEGIN SOLUTION (from exercise 2.2)\n    return 1\n"
                "    # END SOLUTION"
            ),
            v4.new_markdown_cell("Last words.\n\n## Going further (optional)\n\nnot counted " * 9),
            v4.new_code_cell("not_counted = 1\n" * 40),
        ]
    )


def test_it_counts_prose_code_outputs_pictures_and_each_exercises_work():
    path = pace.core_path(_notebook())
    assert path.words == 152  # the Going further heading ends the count mid-cell
    assert path.code_cells == 4
    assert path.code_lines == 3 + 1 + 1 + 1  # `def` lines are read; comments are not
    assert path.output_lines == pace.OUTPUT_LINES_READ  # 30 printed, 20 read
    assert path.pictures == 1
    # a 15-line answer: 1.3 minutes a line to write, one line: 1.3; each 1.5 to check
    assert path.exercise_minutes == pytest.approx((15 * 1.3 + 1.5, 1.3 + 1.5))
    assert path.pasted == 1
    parts = path.parts()
    assert parts["prose"] == pytest.approx(152 / 120)
    assert parts["code"] == pytest.approx(6 / 10)
    assert parts["outputs"] == pytest.approx((20 * 3 + 90) / 60)
    assert parts["exercises"] == pytest.approx(15 * 1.3 + 1.5 + 1.3 + 1.5 + 1.0)
    assert path.minutes == pytest.approx(sum(parts.values()))


def test_an_exercises_own_minutes_replace_the_rule():
    own = [SimpleNamespace(minutes=4), SimpleNamespace(minutes=None)]
    assert pace.core_path(_notebook(), own).exercise_minutes == pytest.approx((5.5, 2.8))


def test_the_command_prints_every_lesson_part_by_part():
    run = subprocess.run(
        [sys.executable, "-m", "ddp_helpers", "pace"], cwd=ROOT, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    cores = [line for line in lines if not line.startswith(" ")]
    assert [line[:3] for line in cores] == [f"{lesson}:" for lesson in LESSONS]
    assert all("prose" in line and "exercises" in line for line in cores)
    further = [line for line in lines if line.startswith("    going further: ")]
    assert len(further) == len(LESSONS) and "What communication costs" in further[2]


def _further_notebook():
    v4 = nbformat.v4
    cells = [
        v4.new_markdown_cell("# 09 · A lesson\n\n*Core path: about 1 minutes of reading and "
                             "running, 1 exercise. The rest is optional.*\n\nWords " * 1),
        v4.new_code_cell("def f():\n    # BEGIN SOLUTION\n    return 1\n    # END SOLUTION"),
        v4.new_markdown_cell("Done.\n\n## Going further (optional)\n\nAn intro of six words."),
        v4.new_markdown_cell("### First look\n\n" + "word " * 120),
        v4.new_code_cell("x = 1\n" * 10),
        v4.new_markdown_cell(
            "### Second look\n\n" + "word " * 60 + "\n\n### Exercise 9.2 · Write it"
        ),
        v4.new_code_cell("def g():\n    # BEGIN SOLUTION\n" + "    y = 2\n" * 4
                         + "    # END SOLUTION"),
    ]  # fmt: skip
    for i, cell in enumerate(cells):
        cell["id"] = f"09-{i}"
    return v4.new_notebook(cells=cells)


def test_going_further_is_counted_section_by_section_an_exercise_inside_its_section():
    counted = pace.count(_further_notebook())
    assert counted.core.exercise_minutes == pytest.approx((2.8,))
    first, second = counted.sections
    assert (first.title, first.anchor, first.cell) == ("First look", "further-09-3", "09-3")
    assert first.path.words == 2 + 120 and first.path.code_lines == 10
    # The exercise's heading is not a section: its prose and its answer are the second's.
    assert second.title == "Second look" and second.path.words == 2 + 60 + 4
    assert second.path.exercise_minutes == pytest.approx((4 * 1.3 + 1.5,))
    assert counted.further_minutes == pytest.approx(
        counted.intro.minutes + first.path.minutes + second.path.minutes
    )


def test_stated_times_name_each_section_and_do_not_move_the_count():
    nb = _further_notebook()
    counted = pace.count(nb)
    for cell_id, text in pace.stated_texts(nb, counted, "en").items():
        next(c for c in nb.cells if c.get("id") == cell_id).source = text
    top = nb.cells[0].source
    assert pace.stated(nb) == (counted.core.rounded, 1)
    assert f"about {counted.further_rounded} minutes more, in the sections below" in top
    assert "- [First look](#further-09-3), about 2 min" in top
    assert '<a id="further-09-3"></a>\n\n### First look (about 2 min)' in nb.cells[3].source
    assert pace.count(nb) == counted  # the times, the list and the anchors are not counted
    # The total is Going further's count rounded half up, and what the list adds up to.
    assert counted.further_rounded == int(counted.further_minutes + 0.5)
    assert sum(counted.section_minutes) == counted.further_rounded
    pairs = zip(counted.section_minutes, counted.sections, strict=True)
    assert all(abs(n - s.path.minutes) < 1 for n, s in pairs)
    again = pace.stated_texts(nb, counted, "en")
    assert all(next(c for c in nb.cells if c.get("id") == k).source == v for k, v in again.items())
    # A list that ends the cell is replaced whole, not doubled.
    nb.cells[0].source = nb.cells[0].source.split("\n\nWords")[0]
    twice = pace.stated_texts(nb, counted, "en")[nb.cells[0].get("id")]
    assert twice.count("- [First look]") == 1


def test_stated_minutes_round_half_up_and_the_list_adds_up_to_the_total():
    # Python's round() takes 2.5 to 2; a stated time takes it to 3.
    assert [pace._rounded(m) for m in (2.5, 3.5, 0.2, 1.49)] == [3, 4, 1, 1]
    # Largest remainders: each its whole minutes, then the minutes left to the largest
    # remainders, so the list adds up to the total (here 1.1 of text before the sections).
    assert pace._apportioned([2.475, 5.2, 0.983, 4.4], 14) == (3, 5, 1, 5)
    assert pace._apportioned([1.5, 1.5], 3) == (2, 1)  # a tie: the earlier one
    assert pace._apportioned([0.2, 0.3, 10.0], 11) == (1, 1, 10)  # minimums come to 12
    counted = pace.count(_further_notebook())
    assert sum(counted.section_minutes) == counted.further_rounded


@pytest.mark.parametrize("lesson", list(LESSONS))
def test_every_time_the_solutions_state_is_the_count_in_both_editions(lesson):
    assert pace.write(check=True, lessons=[lesson]) == [], (
        f"run: python -m ddp_helpers pace --write --only {lesson}, then build"
    )


@pytest.mark.parametrize("lang", ["en", "ja"])
def test_each_lessons_contents_link_to_its_sections_anchors(lang):
    import re

    folder = ROOT / "lessons" / ("" if lang == "en" else lang)
    for path in sorted(folder.glob("0*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
        links = re.findall(r"\]\(#(further-[\w-]+)\)", nb.cells[0].source)
        anchors = re.findall(r'<a id="(further-[\w-]+)"></a>', text)
        assert links == anchors, path.name  # every section listed, in order, and found
