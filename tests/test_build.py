"""`python -m ddp_helpers build`: lessons from solutions, and --check."""

from __future__ import annotations

import contextlib
import io

import nbformat
import pytest

from ddp_helpers.authoring.build import BuildError, build_lessons, make_lesson, strip_solutions


def test_a_region_becomes_the_stub_at_its_indentation():
    src = "def f(x):\n    # BEGIN SOLUTION\n    y = x + 1\n    return y\n    # END SOLUTION\n"
    out, n = strip_solutions(src, "3", 2, ("03_x.ipynb", 5))
    assert n == 1
    assert out == 'def f(x):\n    raise NotImplementedError("exercise 3.2")\n'


def test_an_earlier_answer_pasted_in_keeps_its_own_number_and_is_not_counted():
    src = (
        "def setup():\n    # BEGIN SOLUTION (from exercise 2.2)\n    return 1\n    # END SOLUTION\n"
        "def mine():\n    # BEGIN SOLUTION\n    return 2\n    # END SOLUTION\n"
    )
    out, n = strip_solutions(src, "4", 1, ("04_x.ipynb", 3))
    assert n == 1
    assert out == (
        'def setup():\n    raise NotImplementedError("exercise 2.2")\n'
        'def mine():\n    raise NotImplementedError("exercise 4.1")\n'
    )


def test_execute_only_runs_the_named_lessons(tmp_path, monkeypatch):
    import nbclient

    from ddp_helpers.authoring import build

    for name in ("01_a.ipynb", "02_b.ipynb"):
        nbformat.write(nbformat.v4.new_notebook(), tmp_path / name)
    ran = []
    monkeypatch.setattr(
        nbclient,
        "NotebookClient",
        lambda nb, **kw: ran.append(kw) or type("C", (), {"execute": lambda s: None})(),
    )
    with contextlib.redirect_stdout(io.StringIO()) as out:
        build.execute_solutions(tmp_path, only=["02"])
    assert len(ran) == 1 and "executed solutions/02_b.ipynb" in out.getvalue()


def test_an_unclosed_region_is_an_error_naming_the_place():
    with pytest.raises(BuildError, match=r"03_x.ipynb, cell 5: `# BEGIN SOLUTION` on line 2"):
        strip_solutions("def f():\n    # BEGIN SOLUTION\n    return 1\n", "3", 1, ("03_x.ipynb", 5))


def _notebook():
    nb = nbformat.v4.new_notebook()
    cells = [
        nbformat.v4.new_markdown_cell("# Title"),
        nbformat.v4.new_code_cell(
            "def a():\n    # BEGIN SOLUTION\n    return 1\n    # END SOLUTION"
        ),
        nbformat.v4.new_code_cell("print('secret')"),
        nbformat.v4.new_code_cell(
            "def b():\n    # BEGIN SOLUTION\n    return 2\n    # END SOLUTION"
        ),
    ]
    cells[2].metadata["tags"] = ["solution-only"]
    cells[1].outputs = [nbformat.v4.new_output("stream", text="1\n")]
    cells[1].execution_count = 4
    nb.cells = cells
    return nb


def test_make_lesson_numbers_stubs_drops_solution_only_cells_and_clears_outputs():
    lesson, regions = make_lesson(_notebook(), "07_demo.ipynb")
    assert regions == 2
    assert [c.source for c in lesson.cells] == [
        "# Title",
        'def a():\n    raise NotImplementedError("exercise 7.1")',
        'def b():\n    raise NotImplementedError("exercise 7.2")',
    ]
    assert lesson.cells[1].outputs == [] and lesson.cells[1].execution_count is None


def test_check_names_the_stale_lesson_and_build_fixes_it(tmp_path):
    solutions, lessons = tmp_path / "solutions", tmp_path / "lessons"
    solutions.mkdir()
    nbformat.write(_notebook(), solutions / "07_demo.ipynb")
    assert build_lessons(solutions, lessons, check=True) == [
        "lessons/07_demo.ipynb is missing: run `python -m ddp_helpers build`."
    ]
    build_lessons(solutions, lessons)
    assert build_lessons(solutions, lessons, check=True) == []
    nb = nbformat.read(solutions / "07_demo.ipynb", as_version=4)
    nb.cells[0].source = "# A new title"
    nbformat.write(nb, solutions / "07_demo.ipynb")
    problems = build_lessons(solutions, lessons, check=True)
    assert problems and "lessons/07_demo.ipynb is out of date" in problems[0]


def test_the_cli_exits_non_zero_when_lessons_are_stale(tmp_path, monkeypatch):
    import ddp_helpers.authoring.build as build

    solutions, lessons = tmp_path / "solutions", tmp_path / "lessons"
    solutions.mkdir()
    nbformat.write(_notebook(), solutions / "07_demo.ipynb")
    from ddp_helpers.__main__ import main

    monkeypatch.setattr(build.build_lessons, "__defaults__", (solutions, lessons, False, None))
    assert main(["build", "--check"]) == 1
    assert main(["build"]) == 0
    assert main(["build", "--check"]) == 0


@pytest.mark.parametrize(
    ("command", "option"), [("build", "--execute"), ("export", "--output"), ("grade", "--jobs")]
)
def test_each_command_answers_help_with_its_own_options(command, option):
    from ddp_helpers.__main__ import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as done:
        main([command, "--help"])
    assert done.value.code == 0
    assert f"usage: python -m ddp_helpers {command}" in out.getvalue() and option in out.getvalue()


def test_a_solution_outside_the_registry_and_a_listed_lesson_without_one_are_named(tmp_path):
    solutions, lessons = tmp_path / "solutions", tmp_path / "lessons"
    solutions.mkdir()
    nbformat.write(_notebook(), solutions / "07_demo.ipynb")
    problems = build_lessons(solutions, lessons, listed={"08_next.ipynb"})
    assert any("solutions/07_demo.ipynb is not a lesson of the course" in p for p in problems)
    assert any("LESSONS lists solutions/08_next.ipynb, which does not exist" in p for p in problems)
