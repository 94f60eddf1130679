"""The core-path estimate: what it counts, and the rates it counts with."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import nbformat
import pytest

from conftest import ROOT
from ddp_helpers.authoring import pace


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
    # a 15-line answer: 15 minutes to write, one line: a minute; each a minute to check
    assert path.exercise_minutes == (16.0, 2.0)
    assert path.pasted == 1
    parts = path.parts()
    assert parts["prose"] == pytest.approx(152 / 150)
    assert parts["code"] == pytest.approx(6 / 10)
    assert parts["outputs"] == pytest.approx((20 * 3 + 60) / 60)
    assert parts["exercises"] == pytest.approx(16 + 2 + 0.5)
    assert path.minutes == pytest.approx(sum(parts.values()))


def test_an_exercises_own_minutes_replace_the_rule():
    own = [SimpleNamespace(minutes=4), SimpleNamespace(minutes=None)]
    assert pace.core_path(_notebook(), own).exercise_minutes == (5.0, 2.0)  # + the check


def test_the_command_prints_every_lesson_part_by_part():
    run = subprocess.run(
        [sys.executable, "-m", "ddp_helpers", "pace"], cwd=ROOT, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert [line[:3] for line in lines] == ["01:", "02:", "03:", "04:"]
    assert all("prose" in line and "exercises" in line for line in lines)
