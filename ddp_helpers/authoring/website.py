"""The course as a website (`make site`): the lessons with their outputs, for reading first.

Each page is a lesson as `build` wrote it for the learner (stubs where the answers are, no
`solution-only` cells) with the solution's stored outputs, so that a reader sees what every
cell prints, a check's "correct" included, and no answer. Nothing is executed. Sphinx with
MyST-NB and sphinx-book-theme (the engine of Jupyter Book 1) renders it offline; its
configuration is `site/conf.py`. After the lessons comes the course's last page,
lessons/recipe.md (and each translation's): the recipe as a script beside it, and the classic
bugs, each linked to the lesson cell that shows it. The built pages are then checked: every
internal link resolves and no line of a reference answer appears anywhere in them (the last
page excepted for the answers that are the recipe's own steps: `RECIPE_SHOWS`).
"""

from __future__ import annotations

import ast
import copy
import fnmatch
import html
import importlib.util
import io
import json
import re
import shutil
import subprocess
import sys
import textwrap
import time
import tokenize
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

from .. import i18n
from ..exercises import LESSONS, NOTEBOOKS, exercises_of, lesson_of_notebook, notebook_name
from ..nbformat_quick import nbformat as _nbformat
from ..paths import ROOT
from ..stubs import Region, Regions
from .build import _solutions
from .translations import EDITIONS

BINDER = "https://mybinder.org"
COLAB = "https://colab.research.google.com"

AUTHOR_TEXT = {
    "sphinx_failed": (
        "The website did not build: Sphinx stopped on the warnings above (they count as "
        "errors, so that the site in CI has none). Fix the notebook or site/conf.py they "
        "name, then run `make site` again."
    ),
    "no_sphinx": (
        "Building the website needs Sphinx, MyST-NB and sphinx-book-theme, which the dev "
        'extra installs: run `make setup` (or `pip install -e ".[dev]"`), then `make site` again.'
    ),
    "no_lesson": (
        "lessons/{name} is missing: the website shows the lessons as learners get them. Run "
        "`python -m ddp_helpers build`, then `make site` again."
    ),
    "broken": "{page}: link to {target} does not resolve",
    "leak": "{page}: the reference answer of exercise {id} shows: {line!r}",
    "built": "built the website in {seconds:.1f} s: open {index}",
    "checked": "checked {pages} pages: internal links resolve, no reference answer shows",
}


class SiteError(Exception):
    """The website did not build or failed a check; the message says what to do."""


def theme_options(repository) -> dict:
    """sphinx-book-theme's options: Colab and Binder buttons only where there is a repository
    (`links.repository`, the setting `build` makes the lessons' badges from)."""
    options = {"home_page_in_toc": True, "show_toc_level": 2, "use_download_button": False}
    if repository is not None:
        options |= {
            "repository_url": repository.url,
            "repository_branch": repository.branch,
            "path_to_docs": "lessons",  # the buttons open lessons/NN_*.ipynb, stubs and all
            "use_repository_button": True,
            "launch_buttons": {
                "colab_url": COLAB,
                "binderhub_url": BINDER,
                "notebook_interface": "jupyterlab",
            },
        }
    return options


def course_lexer():
    """IPython's Pygments lexer, also reading the body of a `%%ddp` cell as Python."""
    from ipython_pygments_lexers import IPython3Lexer
    from pygments.lexer import bygroups, using
    from pygments.lexers import Python3Lexer
    from pygments.token import Operator, Text

    class CourseLexer(IPython3Lexer):
        tokens = IPython3Lexer.tokens.copy()
        tokens["root"] = [
            (r"(?s)(\s*)(%%ddp)([^\n]*\n)(.*)", bygroups(Text, Operator, Text, using(Python3Lexer)))
        ] + IPython3Lexer.tokens["root"]

    return CourseLexer


# The anchor `pace --write` puts before a Going further section's heading: in JupyterLab an
# element the lesson's contents link to; on the site, a MyST target of the same name.
ANCHOR_LINE = re.compile(r'^<a id="(further-[\w-]+)"></a>$', re.M)


# The course's last page, beside the lessons in each edition's folder, and its script.
RECIPE, RECIPE_SCRIPT = "recipe.md", "ddp_recipe.py"
# A translation's page of its own after the recipe: the terms beside their English (ja).
GLOSSARY = "glossary.md"
# A link to a lesson's cell as JupyterLab follows it: the fragment `cell-id=` opens the
# notebook at that cell. On the site, the cell's page carries an anchor of that name.
CELL_LINK = re.compile(
    r"\[(?P<text>[^\]]+)\]\((?P<notebook>\d\d_\w+)\.ipynb#cell-id=(?P<cell>[\w-]+)\)"
)
# The exercises whose answers are the recipe's steps (pick the backend, setup, cleanup, wrap,
# the loader, the capstone): the last page shows them, as the capstone's own answer would.
# Any other exercise's answer there is a leak, as on every page.
RECIPE_SHOWS = frozenset({"2.1", "2.2", "2.3", "3.1", "4.1", "4.2"})


def cell_links(text: str) -> list[tuple[str, str]]:
    """The (notebook, cell id) of each link of a page to a lesson's cell."""
    return [(f"{m['notebook']}.ipynb", m["cell"]) for m in CELL_LINK.finditer(text)]


def site_recipe(text: str) -> str:
    """The last page as Sphinx reads it: each link to a lesson's cell made a plain HTML link
    to that cell's anchor on the lesson's page (MyST would look for a heading there)."""
    return CELL_LINK.sub(
        lambda m: f'<a href="{m["notebook"]}.html#cell-id={m["cell"]}">{m["text"]}</a>', text
    )


def site_notebook(solution, lesson, anchors=frozenset()):
    """A page: the lesson's cells, each with the output that the same cell of the solution
    stored; before each cell whose id is in `anchors`, an anchor `cell-id=ID` to link to.

    A cell is the same when its id and its source are: a cell that held an answer has the
    stub in the lesson and keeps no output, since what the answer printed could give it
    away. A check's output stays: it shows what a right answer prints, and no code.
    """
    page = copy.deepcopy(lesson)
    solved = {c.get("id"): c for c in solution.cells if c.cell_type == "code" and c.get("id")}
    # Sphinx's labels are the site's, not a page's: an edition other than English names its
    # own (ja-further-...), and its links with them.
    lang = page.metadata.get("language", "en")
    label = "" if lang == "en" else f"{lang}-"
    for cell in page.cells:
        if cell.cell_type == "markdown":  # a section's anchor, as MyST's target for links
            cell.source = ANCHOR_LINE.sub(rf"({label}\1)=", cell.source)
            cell.source = cell.source.replace("](#further-", f"](#{label}further-")
        source = solved.get(cell.get("id"))
        if cell.cell_type == "code" and source is not None and cell.source == source.source:
            cell.outputs = copy.deepcopy(source.outputs)
            cell.execution_count = source.execution_count
    for index in reversed(range(len(page.cells))):
        cell_id = page.cells[index].get("id")
        if cell_id in anchors:
            anchor = _nbformat().v4.new_markdown_cell(f'<a id="cell-id={cell_id}"></a>')
            anchor["id"] = f"{cell_id}-site-anchor"
            page.cells.insert(index, anchor)
    return page


# The language switch at the top of every page: to the same lesson in the edition named.
SWITCH = {"ja": "[日本語版 (Japanese)]({path})", "en": "[English edition (英語版)]({path})"}


def editions(root: Path) -> list[str]:
    """The editions the site carries: English, and each translation with solutions of its own."""
    return ["en"] + [lang for lang in EDITIONS if (root / "solutions" / lang).is_dir()]


def _folder(lang: str) -> str:
    """Where an edition's pages (and its solutions, lessons and home page) are: "" or "ja/"."""
    return "" if lang == "en" else f"{lang}/"


def _with_switch(page, lang: str, name: str, languages: list[str]):
    """The page with, after its title, a link to each other edition's page of the lesson."""
    up = "../" * _folder(lang).count("/")
    links = [
        SWITCH[other].format(path=f"{up}{_folder(other)}{name}")
        for other in languages
        if other != lang
    ]
    if links:
        cell = _nbformat().v4.new_markdown_cell(" · ".join(links))
        cell["id"] = f"{lesson_of_notebook(name)}-site-language"
        page.cells.insert(1, cell)
    return page


def _globs_that_match(index: str, lessons: list[str]) -> str:
    """The home page without the contents' globs of lessons that no notebook matches: the
    optional lesson after the last page has a glob of its own (`0[5-9]_*`), which a copy of
    the course without it would leave empty, and Sphinx counts an empty glob as an error."""

    def kept(line: str) -> bool:
        pattern = line.strip()
        if not pattern.startswith("0") or not any(c in pattern for c in "*["):
            return True
        return any(fnmatch.fnmatch(name, pattern) for name in lessons)

    return "".join(line for line in index.splitlines(keepends=True) if kept(line))


def write_sources(root: Path, src: Path) -> list[str]:
    """Sphinx's source folder: site/index.md, a page per lesson and the last page with its
    script; for each translation, site/<lang>/index.md and its pages under <lang>/, each
    lesson's page with a language switch (the last page has its own)."""
    nbformat = _nbformat()
    if src.exists():
        shutil.rmtree(src)
    src.mkdir(parents=True)
    languages = editions(root)
    names = []
    for lang in languages:
        sub = _folder(lang)
        (src / sub).mkdir(exist_ok=True)
        index = (root / "site" / sub / "index.md").read_text(encoding="utf-8")
        lessons = [p.stem for p in _solutions(root / "solutions" / sub)]
        (src / sub / "index.md").write_text(_globs_that_match(index, lessons), encoding="utf-8")
        recipe = (root / "lessons" / sub / RECIPE).read_text(encoding="utf-8")
        (src / sub / RECIPE).write_text(site_recipe(recipe), encoding="utf-8")
        shutil.copy(root / "lessons" / sub / RECIPE_SCRIPT, src / sub / RECIPE_SCRIPT)
        if (root / "lessons" / sub / GLOSSARY).is_file():
            shutil.copy(root / "lessons" / sub / GLOSSARY, src / sub / GLOSSARY)
        links = cell_links(recipe)
        for path in _solutions(root / "solutions" / sub):
            lesson = root / "lessons" / sub / path.name
            if not lesson.is_file():
                raise SiteError(AUTHOR_TEXT["no_lesson"].format(name=sub + path.name))
            read = [nbformat.read(p, as_version=4) for p in (path, lesson)]
            anchors = {cell for notebook, cell in links if notebook == path.name}
            page = _with_switch(site_notebook(*read, anchors), lang, path.name, languages)
            nbformat.write(page, src / sub / path.name)
            names.append(sub + path.name)
    return names


def build_site(root: Path = ROOT, out: Path | None = None, quiet: bool = True) -> Path:
    """Build the website into out/html (default site/_build); return that folder."""
    if not all(importlib.util.find_spec(m) for m in ("sphinx", "myst_nb", "sphinx_book_theme")):
        raise SiteError(AUTHOR_TEXT["no_sphinx"])
    out = Path(out) if out is not None else root / "site" / "_build"
    write_sources(root, out / "src")
    html_dir = out / "html"
    if html_dir.exists():
        shutil.rmtree(html_dir)
    command = [sys.executable, "-m", "sphinx", "-b", "html", "-W", "--keep-going", "-E"]
    command += ["-c", str(root / "site"), "-d", str(out / "doctrees")]
    command += ["-q"] if quiet else []
    command += [str(out / "src"), str(html_dir)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SiteError(f"{done.stdout}{done.stderr}\n{AUTHOR_TEXT['sphinx_failed']}")
    for lang in editions(root)[1:]:  # Sphinx has one language a project: say each page's
        for page in (html_dir / lang).glob("*.html"):
            text = page.read_text(encoding="utf-8")
            page.write_text(text.replace('<html lang="en"', f'<html lang="{lang}"', 1))
    return html_dir


def _pages(html_dir: Path) -> list[Path]:
    """The site's pages; _static/ holds the theme's own files, Jinja macros among them."""
    return sorted(p for p in html_dir.rglob("*.html") if "_static" not in p.parts)


class _Links(HTMLParser):
    """The ids of a page and the links (href, src) it holds."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        for key, value in attrs:
            if key in ("id", "name") and value:
                self.ids.add(value)
            elif key in ("href", "src") and value:
                self.links.append(value)


def broken_links(html_dir: Path) -> list[str]:
    """Each link between the site's own files (pages, anchors, pictures, styles) that
    does not resolve; links to other sites are not followed (no network)."""
    pages = {}
    for page in _pages(html_dir):
        parser = _Links()
        parser.feed(page.read_text(encoding="utf-8"))
        pages[page.resolve()] = parser
    problems = []
    for page, parser in pages.items():
        for link in parser.links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc or link.startswith(("mailto:", "javascript:")):
                continue
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if target.is_dir():
                target = target / "index.html"
            rel = page.relative_to(html_dir.resolve())
            if not target.is_file() or not target.is_relative_to(html_dir.resolve()):
                problems.append(AUTHOR_TEXT["broken"].format(page=rel, target=link))
            elif parts.fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else set()
                if unquote(parts.fragment) not in ids:
                    problems.append(AUTHOR_TEXT["broken"].format(page=rel, target=link))
    return problems


# Lines that say nothing about an answer: punctuation, a bare keyword, a lone name.
_TRIVIAL = re.compile(r"^(?:[\W_]*|(?:else|try|finally|pass|continue|break|return)\W*|\w+)$")


def _normal(text: str) -> str:
    return " ".join(text.split())


def _code_lines(lines: list[str]) -> list[str]:
    """The lines without their comments (a leak may have dropped them)."""
    lines = textwrap.dedent("\n".join(lines)).split("\n")
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO("\n".join(lines) + "\n").readline))
    except (tokenize.TokenError, SyntaxError):
        return lines
    for token in reversed(tokens):
        if token.type == tokenize.COMMENT:
            row, col = token.start
            lines[row - 1] = lines[row - 1][:col]
    return lines


def _regions(cells, lesson: str) -> dict[str, list[str]]:
    """A solution notebook's answer regions by exercise id, numbered as `build` does."""
    found: dict[str, list[str]] = {}
    regions = Regions(lesson)
    for cell in cells:
        for piece in regions.walk(cell.source):
            if isinstance(piece, Region):
                found.setdefault(piece.exercise, []).extend(piece.lines)
    return found


def _body_lines(source: str) -> list[str]:
    """A reference answer's lines without its `def` line and docstring."""
    tree = ast.parse(source)
    if not (tree.body and isinstance(tree.body[0], ast.FunctionDef | ast.AsyncFunctionDef)):
        return source.split("\n")
    body = tree.body[0].body
    if isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        body = body[1:] or body
    lines = source.split("\n")
    return lines[body[0].lineno - 1 : body[-1].end_lineno]


def answer_lines(root: Path = ROOT) -> dict[str, set[str]]:
    """Per exercise, the lines of its answers that would give them away on a page.

    Taken from each `solution_source()` (what `.solution()` prints), from the solution
    notebooks' regions, and the last hint whole (it all but gives the answer). A line that
    the learner's own notebooks show anyway (in a stub, in prose, in an example) or that is
    trivial (a lone keyword, name or bracket) gives nothing away.
    """
    nbformat = _nbformat()
    shown = "\n".join(
        _normal(cell.source)
        for path in sorted((root / "lessons").glob(NOTEBOOKS))
        for cell in nbformat.read(path, as_version=4).cells
    )
    found: dict[str, set[str]] = {}
    for lesson in LESSONS:
        for ex in exercises_of(lesson):
            lines = found.setdefault(ex.id, set())
            lines.update(_code_lines(_body_lines(ex.solution_source())))
            for lang in editions(root):  # the last hint, in every edition's words
                with i18n.using(lang):
                    lines.update(list(ex.hints.values())[-1:])
        path = root / "solutions" / notebook_name(lesson)
        if path.exists():
            cells = nbformat.read(path, as_version=4).cells
            for key, lines in _regions(cells, str(int(lesson))).items():
                found.setdefault(key, set()).update(_code_lines(lines))
    telling = {}
    for key, lines in found.items():
        kept = {_normal(x) for x in lines}
        telling[key] = {
            x for x in kept if not (_TRIVIAL.match(x) or x.startswith("#") or x in shown)
        }
    return telling


def _page_text(path: Path) -> str:
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix == ".html":
        text = html.unescape(re.sub(r"<[^>]*>", "", text))
    elif path.suffix == ".ipynb":  # its sources and outputs as text, not JSON-escaped
        parts = []
        for cell in json.loads(text).get("cells", []):
            parts.append("".join(cell.get("source", "")))
            for output in cell.get("outputs", []):
                parts.append("".join(output.get("text", "")))
                data = output.get("data", {})
                parts += ["".join(v) for k, v in data.items() if k.startswith("text/")]
        text = "\n".join(parts)
    return _normal(text)


def leaked_answers(html_dir: Path, lines: dict[str, set[str]]) -> list[str]:
    """Each page of the site (any text file in it) that shows a line of a reference answer."""
    problems = []
    for path in sorted(p for p in html_dir.rglob("*") if p.is_file()):
        if path.suffix not in (".html", ".ipynb", ".txt", ".js", ".json", ".md"):
            continue
        text = _page_text(path)
        for key, telling in sorted(lines.items()):
            if path.name == RECIPE.replace(".md", ".html") and key in RECIPE_SHOWS:
                continue  # the last page shows the recipe: these answers are its steps
            for line in sorted(telling):
                if line in text:
                    page = path.relative_to(html_dir)
                    problems.append(AUTHOR_TEXT["leak"].format(page=page, id=key, line=line))
    return problems


def check_site(html_dir: Path, root: Path = ROOT) -> list[str]:
    """What is wrong with a built site: broken internal links, answers shown."""
    return broken_links(html_dir) + leaked_answers(html_dir, answer_lines(root))


def main(argv: list[str] | None = None) -> int:
    """`make site`: build, check, and say where the pages are."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m ddp_helpers.authoring.website", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--out", type=Path, help="the build folder (default site/_build)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        html_dir = build_site(out=args.out)
    except SiteError as exc:
        print(exc, file=sys.stderr)
        return 1
    seconds = time.monotonic() - started
    print(AUTHOR_TEXT["built"].format(seconds=seconds, index=html_dir / "index.html"), flush=True)
    problems = check_site(html_dir)
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        return 1
    print(AUTHOR_TEXT["checked"].format(pages=len(_pages(html_dir))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
