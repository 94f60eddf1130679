"""The course as a website (`make site`): built offline from the solutions' stored outputs,
the exercises as stubs and no answer anywhere, every lesson there, links that resolve,
Colab and Binder buttons only where pyproject.toml names the repository, and pages that
look right in a browser."""

from __future__ import annotations

import re
import shutil
import time

import nbformat
import pytest
from browser import browser

from ddp_helpers.authoring.build import make_lesson
from ddp_helpers.authoring.links import repository
from ddp_helpers.authoring.website import (
    RECIPE,
    RECIPE_SHOWS,
    SiteError,
    answer_lines,
    broken_links,
    build_site,
    cell_links,
    leaked_answers,
    site_notebook,
)
from ddp_helpers.exercises import LESSONS, exercises_of, notebook_name
from support import ROOT

URL = "https://github.com/example/ddp-basics"
# Exercises whose whole answer the lessons show anyway, so that no page can give it away:
# 2.3 is `dist.destroy_process_group()`, which every lesson calls; lesson 03's cells write
# 3.1's `DDP(model.to(device), device_ids=...)` out, to run before the learner finishes it.
SHOWN_BY_THE_LESSONS = {"2.3", "3.1"}


def _page(lesson: str) -> str:
    return notebook_name(lesson).replace(".ipynb", ".html")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    started = time.monotonic()
    html_dir = build_site(out=tmp_path_factory.mktemp("site"))
    return html_dir, time.monotonic() - started


def _copy_of_the_course(tmp_path, urls: str | None, only: str | None = None):
    """The files the site is built from, in tmp_path, with [project.urls] as given (and of
    the notebooks, only lesson `only`'s, in both editions, when it is given)."""
    keep = shutil.ignore_patterns("_build")
    shutil.copytree(ROOT / "site", tmp_path / "site", ignore=keep)
    for folder in ("solutions", "lessons"):
        shutil.copytree(ROOT / folder, tmp_path / folder)
        for path in (tmp_path / folder).rglob("*.ipynb"):
            if only and not path.name.startswith(f"{only}_"):
                path.unlink()
    text = (ROOT / "pyproject.toml").read_text()
    text = re.sub(r"(?ms)^\[project\.urls\]\n.*?(?=^\[)", "", text)
    if urls:
        section = f"[project.urls]\n{urls}\n\n[project.optional-dependencies]"
        text = text.replace("[project.optional-dependencies]", section)
    (tmp_path / "pyproject.toml").write_text(text)
    return tmp_path


def test_it_builds_with_every_lesson_and_the_index_links_each(site, record_property):
    html_dir, seconds = site
    # Its time is said, not asserted: a budget is a benchmark's, and a loaded machine's.
    record_property("ddp_note", f"the website built in {seconds:.0f} s")
    index = (html_dir / "index.html").read_text()
    for lesson in LESSONS:
        page = html_dir / _page(lesson)
        assert page.is_file(), f"no page for lesson {lesson}"
        title = re.search(r"<h1>(.*?)<a", page.read_text(), re.S).group(1)
        assert title.startswith(f"{lesson} · "), title
        assert f'href="{_page(lesson)}"' in index


def test_pages_show_the_stubs_the_outputs_the_checks_and_the_pictures(site):
    html_dir, _ = site
    text = (html_dir / _page("01")).read_text()
    plain = re.sub(r"<[^>]+>", "", text).replace("&quot;", '"')
    assert 'raise NotImplementedError("exercise 1.2")' in plain  # the learner's stub
    assert "✅ Exercise 1.2: correct." in plain  # what a right answer prints
    for rank in range(3):  # a %%ddp cell's multi-rank output
        assert f"[rank {rank}] I am rank {rank} of 3" in plain
    pictures = re.findall(r'<img[^>]+src="(_images/[^"]+\.png)"', text)
    assert pictures and all((html_dir / p).stat().st_size > 1000 for p in pictures)


def test_every_internal_link_resolves(site):
    html_dir, _ = site
    assert broken_links(html_dir) == []


def test_the_link_check_finds_a_missing_page_anchor_and_picture(tmp_path):
    (tmp_path / "b.html").write_text('<h2 id="there">B</h2>')
    (tmp_path / "a.html").write_text(
        '<a href="b.html#there">ok</a> <a href="#top" id="top">ok</a> '
        '<a href="https://example.org/x">not followed</a> '
        '<a href="gone.html">1</a> <a href="b.html#nowhere">2</a> <img src="_images/x.png">'
    )
    assert broken_links(tmp_path) == [
        "a.html: link to gone.html does not resolve",
        "a.html: link to b.html#nowhere does not resolve",
        "a.html: link to _images/x.png does not resolve",
    ]


def test_no_reference_answer_shows_anywhere_in_the_site(site):
    html_dir, _ = site
    assert leaked_answers(html_dir, answer_lines()) == []


def test_the_answer_search_finds_each_answer_leaked_into_a_page(site, tmp_path):
    """Each exercise's `.solution()` output and its last hint, put into a real page as
    Sphinx would (highlighted code, an output block), is found."""
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import PythonLexer

    html_dir, _ = site
    lines = answer_lines()
    assert {key for key, found in lines.items() if not found} <= SHOWN_BY_THE_LESSONS
    page = (html_dir / _page("01")).read_text()
    for lesson in LESSONS:
        for ex in exercises_of(lesson):
            leaks = []
            if (
                " ".join(list(ex.hints.values())[-1].split()) in lines[ex.id]
            ):  # 3.1's the lesson shows
                leaks.append(
                    f'<div class="output stream"><pre>{list(ex.hints.values())[-1]}</pre></div>'
                )
            if ex.id not in SHOWN_BY_THE_LESSONS:
                leaks.append(highlight(ex.solution_source(), PythonLexer(), HtmlFormatter()))
            for leak in leaks:
                leaky = page.replace("</article>", leak + "</article>")
                (tmp_path / "leaky.html").write_text(leaky)
                found = leaked_answers(tmp_path, lines)
                assert any(f"exercise {ex.id} shows" in f for f in found), (ex.id, leak[:80])


def test_a_page_is_the_lesson_with_the_outputs_of_the_cells_it_shares_with_the_solution():
    solution = nbformat.v4.new_notebook()
    answer = nbformat.v4.new_code_cell(
        "def f():\n    # BEGIN SOLUTION\n    return 42\n    # END SOLUTION"
    )
    answer.outputs = [nbformat.v4.new_output("stream", text="the answer prints 42\n")]
    check = nbformat.v4.new_code_cell("ex.q1.check(f)")
    check.outputs = [nbformat.v4.new_output("stream", text="✅ Exercise 9.1: correct.\n")]
    hidden = nbformat.v4.new_code_cell("print(f())", metadata={"tags": ["solution-only"]})
    hidden.outputs = [nbformat.v4.new_output("stream", text="42\n")]
    solution.cells = [nbformat.v4.new_markdown_cell("# 09 · x"), answer, check, hidden]
    lesson, _ = make_lesson(solution, "09_x.ipynb")
    lesson.cells.insert(1, nbformat.v4.new_code_cell("import ddp_helpers"))  # build's own
    page = site_notebook(solution, lesson)
    assert [c.source for c in page.cells] == [
        "# 09 · x",
        "import ddp_helpers",
        'def f():\n    raise NotImplementedError("exercise 9.1")',
        "ex.q1.check(f)",
    ]
    assert [c.get("outputs") for c in page.cells] == [None, [], [], check.outputs]


def test_launch_buttons_only_where_pyproject_names_the_repository(site, tmp_path):
    html_dir, _ = site
    configured = repository(ROOT / "pyproject.toml")
    # This checkout's own site, then a copy of the course with the other setting.
    other = _copy_of_the_course(
        tmp_path, None if configured else f'Repository = "{URL}"', only="01"
    )  # lesson 01's page is the one looked at
    other_repository = repository(other / "pyproject.toml")
    assert (other_repository is None) != (configured is None)
    other_pages = build_site(root=other, out=tmp_path / "out")
    for repo, pages in ((configured, html_dir), (other_repository, other_pages)):
        text = (pages / _page("01")).read_text()
        if repo is None:
            assert "colab.research.google.com" not in text and "mybinder.org" not in text
            assert "rocket button" not in (pages / "index.html").read_text()
            continue
        at = f"{repo.owner}/{repo.name}/blob/{repo.branch}/lessons/{notebook_name('01')}"
        assert f'href="https://colab.research.google.com/github/{at}"' in text
        binder = f"{repo.owner}/{repo.name}/{repo.branch}?urlpath=lab/tree/lessons/"
        assert f'href="https://mybinder.org/v2/gh/{binder}{notebook_name("01")}"' in text
        assert "rocket button" in (pages / "index.html").read_text()


def test_a_warning_fails_the_build_and_says_what_to_do(tmp_path):
    root = _copy_of_the_course(tmp_path, None)
    for path in [*(root / "solutions").glob("*.ipynb"), *(root / "lessons").glob("*.ipynb")]:
        path.unlink()
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# 01 · x\n\nSee [the missing page](missing.md).")]
    nbformat.write(nb, root / "solutions" / "01_x.ipynb")
    nbformat.write(nb, root / "lessons" / "01_x.ipynb")
    with pytest.raises(SiteError) as error:
        build_site(root=root, out=tmp_path / "out")
    assert "missing.md" in str(error.value) and "make site" in str(error.value)


@pytest.mark.browser
def test_the_pages_look_right_in_a_browser(site):
    """Pictures loaded, no page wider than a 1280-pixel window, outputs wrapped."""
    html_dir, _ = site
    with browser() as b:
        page = b.new_page(viewport={"width": 1280, "height": 900})
        for lesson in LESSONS:
            page.goto((html_dir / _page(lesson)).as_uri())
            pictures = page.eval_on_selector_all(
                "article img", "imgs => imgs.map(i => i.complete && i.naturalWidth > 0)"
            )
            assert all(pictures), f"lesson {lesson}: a picture did not load"
            width = page.evaluate("document.documentElement.scrollWidth")
            assert width <= 1280, f"lesson {lesson}: the page is {width} px wide"
            scrolled = page.eval_on_selector_all(
                "div.cell_output pre", "ps => ps.filter(p => p.scrollWidth > p.clientWidth).length"
            )
            assert scrolled == 0, f"lesson {lesson}: {scrolled} outputs scroll sideways"
            assert page.locator("div.cell_output").first.is_visible()


def test_the_japanese_edition_has_its_pages_outputs_and_a_language_switch_each_way(site):
    html_dir, _ = site
    index = (html_dir / "ja" / "index.html").read_text()
    assert 'href="ja/index.html"' in (html_dir / "index.html").read_text()
    for lesson in LESSONS:
        page = html_dir / "ja" / _page(lesson)
        text = page.read_text()
        assert f'href="{_page(lesson)}"' in index
        assert '<html lang="ja"' in text
        assert f'href="../{_page(lesson)}"' in text  # to the English page, and back:
        assert f'href="ja/{_page(lesson)}"' in (html_dir / _page(lesson)).read_text()
    plain = re.sub(r"<[^>]+>", "", (html_dir / "ja" / _page("01")).read_text())
    assert "✅ 演習 1.2: 正解です" in plain  # the Japanese stored outputs
    assert 'raise NotImplementedError("演習 1.2")' in plain.replace("&quot;", '"')


def test_the_last_page_follows_the_lessons_in_both_editions_and_links_to_their_cells(site):
    """lessons/recipe.md (and ja/) after lesson 04 in each edition's contents; each of its
    links to a lesson's cell points at that cell's anchor (the link check finds the anchor)."""
    html_dir, _ = site
    for folder in ("", "ja/"):
        index = (html_dir / folder / "index.html").read_text()
        assert index.index('href="recipe.html"') > index.index(f'href="{_page("04")}"')
        text = (html_dir / folder / "recipe.html").read_text()
        links = cell_links((ROOT / "lessons" / folder / RECIPE).read_text())
        assert links
        for notebook, cell in links:
            assert f'href="{notebook.replace(".ipynb", ".html")}#cell-id={cell}"' in text
            page = (html_dir / folder / notebook.replace(".ipynb", ".html")).read_text()
            assert f'id="cell-id={cell}"' in page
        assert re.search(r'href="[^"]*_downloads/[^"]+/ddp_recipe\.py"', text)


def test_the_last_page_may_show_the_recipes_own_answers_and_no_other(site, tmp_path):
    """The recipe's steps are the answers of RECIPE_SHOWS; any other exercise's answer
    leaked into the last page is found, as on every page."""
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import PythonLexer

    html_dir, _ = site
    lines = answer_lines()
    page = (html_dir / "recipe.html").read_text()
    for lesson in LESSONS:
        for ex in exercises_of(lesson):
            if ex.id in RECIPE_SHOWS | SHOWN_BY_THE_LESSONS or not lines[ex.id]:
                continue
            leak = highlight(ex.solution_source(), PythonLexer(), HtmlFormatter())
            (tmp_path / "recipe.html").write_text(page.replace("</article>", leak + "</article>"))
            found = leaked_answers(tmp_path, lines)
            assert any(f"exercise {ex.id} shows" in f for f in found), ex.id


def test_the_japanese_glossary_page_follows_the_recipe_and_lesson_01_links_to_it(site):
    """lessons/ja/glossary.md (用語対応表): in the Japanese contents after the last page,
    with its tables, and linked from the Japanese lesson 01's first cell (the link check
    above finds the link resolving)."""
    html_dir, _ = site
    index = (html_dir / "ja" / "index.html").read_text()
    assert index.index('href="glossary.html"') > index.index('href="recipe.html"')
    page = (html_dir / "ja" / "glossary.html").read_text()
    assert "用語対応表" in page and page.count("<table") == len(LESSONS)  # a table a lesson
    assert 'href="glossary.html"' in (html_dir / "ja" / _page("01")).read_text()
    assert not (html_dir / "glossary.html").exists()  # the English edition has none
