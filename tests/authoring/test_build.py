"""`python -m ddp_helpers build`: lessons from solutions, and --check."""

from __future__ import annotations

import contextlib
import io
import re

import nbformat
import pytest

from ddp_helpers.authoring.build import BuildError, build_lessons, make_lesson, strip_solutions
from ddp_helpers.stubs import Regions


def _stripped(src: str, lesson: str, first: int, where: tuple[str, int]) -> tuple[str, int]:
    """The cell's source as build writes it, and how many of the lesson's exercises it has."""
    regions = Regions(lesson, first)
    return strip_solutions(src, regions, where), regions.count


def test_a_region_becomes_the_stub_at_its_indentation():
    src = "def f(x):\n    # BEGIN SOLUTION\n    y = x + 1\n    return y\n    # END SOLUTION\n"
    out, n = _stripped(src, "3", 2, ("03_x.ipynb", 5))
    assert n == 1
    assert out == 'def f(x):\n    raise NotImplementedError("exercise 3.2")\n'


def test_an_earlier_answer_pasted_in_keeps_its_own_number_and_is_not_counted():
    src = (
        "def setup():\n    # BEGIN SOLUTION (from exercise 2.2)\n    return 1\n    # END SOLUTION\n"
        "def mine():\n    # BEGIN SOLUTION\n    return 2\n    # END SOLUTION\n"
    )
    out, n = _stripped(src, "4", 1, ("04_x.ipynb", 3))
    assert n == 1
    assert out == (
        'def setup():\n    raise NotImplementedError("exercise 2.2")\n'
        'def mine():\n    raise NotImplementedError("exercise 4.1")\n'
    )


def test_a_continued_region_is_more_of_the_exercise_before_it():
    # A class whose methods each hold part of one answer (exercise 3.6's MiniDDP).
    src = (
        "class A:\n    def f(self):\n        # BEGIN SOLUTION\n        return 1\n"
        "        # END SOLUTION\n\n    def g(self):\n        # BEGIN SOLUTION (continued)\n"
        "        return 2\n        # END SOLUTION\n"
        "def h():\n    # BEGIN SOLUTION\n    return 3\n    # END SOLUTION\n"
    )
    out, n = _stripped(src, "3", 6, ("03_x.ipynb", 7))
    assert n == 2  # exercises 3.6 and 3.7
    assert out == (
        'class A:\n    def f(self):\n        raise NotImplementedError("exercise 3.6")\n\n'
        '    def g(self):\n        raise NotImplementedError("exercise 3.6")\n'
        'def h():\n    raise NotImplementedError("exercise 3.7")\n'
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
        _stripped("def f():\n    # BEGIN SOLUTION\n    return 1\n", "3", 1, ("03_x.ipynb", 5))


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


def test_the_cli_exits_non_zero_when_lessons_are_stale(tmp_path):
    solutions, lessons = tmp_path / "solutions", tmp_path / "lessons"
    solutions.mkdir()
    nbformat.write(_notebook(), solutions / "07_demo.ipynb")
    from ddp_helpers.__main__ import main

    roots = ["--solutions", str(solutions), "--lessons", str(lessons)]
    assert main(["build", "--check", *roots]) == 1
    assert main(["build", *roots]) == 0
    assert (lessons / "07_demo.ipynb").is_file()
    assert main(["build", "--check", *roots]) == 0


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


# ------------------------------------------------ Colab and Kaggle: badges and the set-up cell

REPO = "https://github.com/example/ddp-course"


def _course(tmp_path, url: str | None, readme: str | None = None):
    """A course folder: one solution notebook, a pyproject.toml (Repository = url or none)."""
    from support import ROOT

    tmp_path.mkdir(parents=True, exist_ok=True)
    text = (ROOT / "pyproject.toml").read_text()
    text = re.sub(r"(?ms)^\[project\.urls\].*?(?=^\[)", "", text)
    if url is not None:
        text = text.replace(
            "[project.optional-dependencies]",
            f'[project.urls]\nRepository = "{url}"\n\n[project.optional-dependencies]',
        )
    (tmp_path / "pyproject.toml").write_text(text)
    (tmp_path / "solutions").mkdir()
    nbformat.write(_notebook(), tmp_path / "solutions" / "07_demo.ipynb")
    if readme is not None:
        (tmp_path / "README.md").write_text(readme)
    return dict(
        solutions=tmp_path / "solutions",
        lessons=tmp_path / "lessons",
        pyproject=tmp_path / "pyproject.toml",
        readme=tmp_path / "README.md" if readme is not None else None,
    )


def _built(course) -> nbformat.NotebookNode:
    with contextlib.redirect_stdout(io.StringIO()):
        assert build_lessons(**course) == []
    return nbformat.read(course["lessons"] / "07_demo.ipynb", as_version=4)


def test_without_a_repository_a_lesson_gets_a_set_up_cell_and_no_badge_nor_install_line(
    tmp_path,
):
    lesson = _built(_course(tmp_path, url=None))
    title, setup = lesson.cells[0], lesson.cells[1]
    assert title.source == "# Title" and setup.metadata["tags"] == ["course-setup"]
    assert "%pip install PATH_OF_THE_COPY" in setup.source and "torch>=2.8,<2.16" in setup.source
    text = nbformat.writes(lesson)
    for nowhere in ("colab.research", "kaggle.com", "git+", "github.com"):
        assert nowhere not in text


def test_with_a_repository_each_lesson_gets_its_badges_and_an_install_line(tmp_path):
    lesson = _built(_course(tmp_path, url=REPO))
    title, badges, setup = lesson.cells[:3]
    assert title.source == "# Title" and badges.metadata["tags"] == ["course-badges"]
    assert badges.source == (
        "[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
        "(https://colab.research.google.com/github/example/ddp-course/blob/main/lessons/"
        "07_demo.ipynb) "
        "[![Open in Kaggle](https://kaggle.com/static/images/open-in-kaggle.svg)]"
        "(https://kaggle.com/kernels/welcome?src=https://github.com/example/ddp-course/blob/"
        "main/lessons/07_demo.ipynb)"
    )
    assert (
        '%pip install --quiet "ddp-basics @ git+https://github.com/example/ddp-course@main" '
        "\"torch=={version('torch')}\""
    ) in setup.source
    assert [c.id for c in lesson.cells[1:3]] == ["07-badges", "07-setup"]


def test_a_branch_in_the_address_is_the_one_linked_and_installed(tmp_path):
    lesson = _built(_course(tmp_path, url=REPO + "/tree/spring-2027"))
    assert "/ddp-course/blob/spring-2027/lessons/07_demo.ipynb" in lesson.cells[1].source
    assert "git+https://github.com/example/ddp-course@spring-2027" in lesson.cells[2].source


def test_an_address_colab_cannot_open_is_an_error_saying_what_to_write(tmp_path):
    course = _course(tmp_path, url="https://gitlab.com/example/ddp-course")
    with pytest.raises(BuildError, match="not a GitHub address.*https://github.com/OWNER/NAME"):
        build_lessons(**course)


README = "# Course\n\nintro\n\n{block}\n## More\n"
START = "<!-- lesson badges: python -m ddp_helpers build writes them -->"
END = "<!-- end of lesson badges -->"


def test_the_readme_block_gets_a_row_per_lesson_and_empties_without_a_repository(tmp_path):
    course = _course(tmp_path, url=REPO, readme=README.format(block=f"{START}\n{END}"))
    assert build_lessons(**course, check=True)[-1].startswith("README.md's lesson badges are out")
    _built(course)
    text = course["readme"].read_text()
    assert text.startswith("# Course\n\nintro\n\n" + START) and text.endswith(END + "\n## More\n")
    assert "| `07_demo` | [![Open In Colab](" in text
    assert "(https://colab.research.google.com/github/example/ddp-course/blob/main/" in text
    assert "(https://kaggle.com/kernels/welcome?src=https://github.com/example/" in text
    assert build_lessons(**course, check=True) == []
    _course(tmp_path / "again", url=None)  # the same course, the setting removed
    course["pyproject"].write_text((tmp_path / "again" / "pyproject.toml").read_text())
    _built(course)
    assert course["readme"].read_text() == README.format(block=f"{START}\n{END}")


def test_a_readme_without_the_block_is_fine_without_a_repository_and_named_with_one(tmp_path):
    assert build_lessons(**_course(tmp_path / "a", url=None, readme="# Course\n")) == []
    course = _course(tmp_path / "b", url=REPO, readme="# Course\n")
    (problem,) = build_lessons(**course)
    assert "README.md" in problem and START in problem and END in problem


def test_the_set_up_cell_prints_nothing_where_the_package_is_and_says_how_where_it_is_not():
    from ddp_helpers.authoring import build, links
    from kernel_utils import error_of, run_cells, shown

    repo = links.Repository("example", "ddp-course")
    install = build.SETUP_INSTALL.format(requirement=repo.requirement, torch="torch>=2.8,<2.16")
    from_copy = build.SETUP_FROM_COPY.format(torch="torch>=2.8,<2.16")
    hide = 'import sys\nsys.modules["ddp_helpers"] = None  # a kernel without the course'
    outputs = run_cells(install, from_copy, hide, from_copy)
    assert outputs[:3] == [[], [], []]  # IPython read `%pip` in the except block, ran nothing
    error = error_of(outputs[3])
    assert error["ename"] == "ImportError"
    assert "%pip install PATH_OF_THE_COPY" in shown(error) and "make lab" in shown(error)


def test_the_japanese_set_up_cell_says_it_in_japanese():
    # The first words a learner on the wrong kernel reads, before `use_language` has run.
    from ddp_helpers.authoring import build, links
    from kernel_utils import error_of, run_cells, shown

    ja = build.SETUP_TRANSLATED["ja"]
    repo = links.Repository("example", "ddp-course")
    install = ja["install"].format(requirement=repo.requirement, torch="torch>=2.8,<2.16")
    from_copy = ja["from_copy"].format(torch="torch>=2.8,<2.16")
    hide = 'import sys\nsys.modules["ddp_helpers"] = None  # a kernel without the course'
    outputs = run_cells(install, from_copy, hide, from_copy)
    assert outputs[:3] == [[], [], []]
    error = error_of(outputs[3])
    assert error["ename"] == "ImportError"
    assert "このカーネルにはありません" in shown(error)
    assert "%pip install <コピーのパス>" in shown(error)
    from support import ROOT

    lesson = nbformat.read(ROOT / "lessons" / "ja" / "01_rank_and_world_size.ipynb", as_version=4)
    (setup,) = [c for c in lesson.cells if c.get("id") == "01-setup"]
    assert setup.source.splitlines()[0] == ja["from_copy"].splitlines()[0]
    assert "このレッスンには本コースのパッケージ" in setup.source


def test_build_the_site_and_pace_number_the_regions_alike_across_cells():
    """One walker (stubs.Regions) for all three: a region continued in the next cell is the
    same exercise for the stub build writes, for what the site keeps out of its pages and
    for the answer pace counts; a pasted region keeps its own exercise."""
    import nbformat

    from ddp_helpers.authoring import pace
    from ddp_helpers.authoring.build import make_lesson
    from ddp_helpers.authoring.website import _regions

    cells = [
        "def first():\n    # BEGIN SOLUTION\n    return 1\n    # END SOLUTION",
        "class Second:\n    def a(self):\n        # BEGIN SOLUTION\n        return 2\n"
        "        # END SOLUTION",
        "    def b(self):\n        # BEGIN SOLUTION (continued)\n        return 3\n"
        "        x = 4\n        # END SOLUTION",
        "def pasted():\n    # BEGIN SOLUTION (from exercise 2.2)\n    return 5\n    # END SOLUTION",
        "def third():\n    # BEGIN SOLUTION\n    return 6\n    # END SOLUTION",
    ]
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# 03 · t")]
    nb.cells += [nbformat.v4.new_code_cell(c) for c in cells]
    lesson, count = make_lesson(nb, "03_ddp_wrap.ipynb")
    stubs = [c.source.splitlines()[-1].strip() for c in lesson.cells[1:]]
    assert stubs == [
        'raise NotImplementedError("exercise 3.1")',
        'raise NotImplementedError("exercise 3.2")',
        'raise NotImplementedError("exercise 3.2")',  # continued: the same exercise
        'raise NotImplementedError("exercise 2.2")',
        'raise NotImplementedError("exercise 3.3")',
    ]
    assert count == 3
    site = _regions(nb.cells, "3")
    assert site == {
        "3.1": ["    return 1"],
        "3.2": ["        return 2", "        return 3", "        x = 4"],
        "2.2": ["    return 5"],
        "3.3": ["    return 6"],
    }
    counted = pace.count(nb).core
    assert counted.pasted == 1 and len(counted.exercise_minutes) == 3


def test_a_script_a_lesson_runs_is_copied_into_lessons_and_a_stale_copy_is_named(tmp_path):
    # The package ships lesson 05's fsdp_train.py (an installed course has no lessons/); the
    # checkout's lessons/ holds the copy a learner reads and runs.
    from ddp_helpers.authoring.build import _copy_scripts
    from ddp_helpers.paths import PACKAGE, ROOT

    shipped = (PACKAGE / "demos" / "fsdp_train.py").read_text()
    assert (ROOT / "lessons" / "fsdp_train.py").read_text() == shipped
    missing = "lessons/fsdp_train.py is missing: run `python -m ddp_helpers build`."
    assert _copy_scripts(tmp_path, check=True) == [missing]
    assert _copy_scripts(tmp_path, check=False) == []
    assert (tmp_path / "fsdp_train.py").read_text() == shipped
    assert _copy_scripts(tmp_path, check=True) == []
    (tmp_path / "fsdp_train.py").write_text(shipped + "# edited in lessons/\n")
    (problem,) = _copy_scripts(tmp_path, check=True)
    assert "differs from ddp_helpers/demos/fsdp_train.py" in problem and "edit that one" in problem


def test_lesson_05_runs_the_checkouts_copy_of_its_script_and_else_the_packages(tmp_path):
    from ddp_helpers.demos import fsdp_job
    from ddp_helpers.paths import PACKAGE, ROOT

    assert fsdp_job.SCRIPT == ROOT / "lessons" / "fsdp_train.py"  # a learner's edit runs
    assert fsdp_job.script_in(tmp_path) == PACKAGE / "demos" / "fsdp_train.py"  # installed
