"""Lessons from solutions: `python -m ddp_helpers build [--check] [--execute]` (authors, CI)."""

from __future__ import annotations

import copy
import os
import time
from pathlib import Path

from ..exercises import LESSONS, NOTEBOOKS, exercise_prefix, lesson_of_notebook, notebook_name
from ..nbformat_quick import nbformat as _nbformat
from ..paths import PACKAGE, ROOT
from ..stubs import RegionError, Regions, stub_line
from . import links, translations

DROP_TAG = "solution-only"

AUTHOR_TEXT = {
    "unclosed": "{nb}, cell {cell}: `# BEGIN SOLUTION` on line {line} has no `# END SOLUTION`.",
    "stray_end": "{nb}, cell {cell}: `# END SOLUTION` on line {line} has no `# BEGIN SOLUTION`.",
    "no_solutions": "No solution notebooks (NN_*.ipynb) found in {folder}.",
    "stale": (
        "lessons/{name} is out of date with solutions/{name}: run "
        "`python -m ddp_helpers build` and commit the result."
    ),
    "missing": "lessons/{name} is missing: run `python -m ddp_helpers build`.",
    "extra": "{path} has no solution notebook: delete it or add solutions/{name}.",
    "unlisted": (
        "solutions/{name} is not a lesson of the course: add it to LESSONS in "
        "ddp_helpers/exercises/__init__.py (with its exercises in lesson{number}.py), or "
        "rename it to one that is listed."
    ),
    "unwritten": (
        "LESSONS lists solutions/{name}, which does not exist: write it or drop the entry."
    ),
    "wrote": "wrote lessons/{name} ({regions} exercises)",
    "script_stale": (
        "lessons/{name} differs from ddp_helpers/demos/{name}, the copy the package ships "
        "(and lesson 05 runs): edit that one, then run `python -m ddp_helpers build`."
    ),
    "in_sync": "lessons/ is in sync with solutions/ ({count} notebooks)",
    "executed": "executed solutions/{name} in {seconds:.1f} s",
    "readme_stale": (
        "README.md's lesson badges are out of date with pyproject.toml's [project.urls] "
        "Repository: run `python -m ddp_helpers build` and commit the result."
    ),
    "readme_no_block": (
        "pyproject.toml names a Repository, so README.md gets each lesson's Colab and Kaggle "
        "badges, but it has no place for them: add the two lines `{start}` and `{end}` where "
        "they belong, then run `python -m ddp_helpers build`."
    ),
    "wrote_readme": "wrote README.md's lesson badges ({count} lessons)",
}

# The cells `build` puts at the top of every lesson, after its title: the badges (only where
# pyproject.toml names the repository) and the set-up, which prints nothing where the course's
# package is already there (make lab, conda) and elsewhere installs it or says how.
BADGES_TAG, SETUP_TAG = "course-badges", "course-setup"
SETUP_INSTALL = """\
# Set-up for Colab, Kaggle or your own Jupyter: installs the course's package where this kernel
# lacks it, keeping the kernel's own torch (CPU or GPU). Under `make lab` it does nothing.
try:
    import ddp_helpers
except ImportError:
    from importlib.metadata import version

    %pip install --quiet "{requirement}" "torch=={{version('torch')}}"
    import ddp_helpers  # if not found: pip said why above ({torch}; Kaggle: Internet on)"""
SETUP_FROM_COPY = """\
# Set-up: the course's package, there under `make lab`. For another kernel (your own Jupyter,
# VS Code, conda), install it first from a copy of the course: %pip install PATH_OF_THE_COPY
try:
    import ddp_helpers
except ImportError:
    raise ImportError(
        "This lesson needs the course's package (ddp_helpers), which this kernel does not have. "
        "Install it from a copy of the course (git clone or download) in a cell: "
        "`%pip install PATH_OF_THE_COPY`. It keeps this kernel's torch if that is {torch}. "
        "Or run `make lab` in the copy."
    ) from None"""
# The same two cells in a translated edition: the first words a learner on the wrong kernel
# reads come before `use_language`, so they are written in the edition's language here.
SETUP_TRANSLATED = {
    "ja": {
        "install": """\
# Colab、Kaggle、自分の Jupyter 用のセットアップ: このカーネルに本コースの
# パッケージがなければ、カーネル自身の torch（CPU 版でも GPU 版でも）を残したまま
# インストールします。`make lab` では何もしません。
try:
    import ddp_helpers
except ImportError:
    from importlib.metadata import version

    %pip install --quiet "{requirement}" "torch=={{version('torch')}}"
    # 見つからない場合は、上に pip が理由を表示している
    # （{torch}。Kaggle ではインターネットをオン）
    import ddp_helpers""",
        "from_copy": """\
# セットアップ: 本コースのパッケージ（`make lab` の環境には入っている）。ほかのカーネル（自分の
# Jupyter、VS Code、conda）では、先にコースのコピーからインストールする: %pip install <コピーのパス>
try:
    import ddp_helpers
except ImportError:
    raise ImportError(
        "このレッスンには本コースのパッケージ（ddp_helpers）が必要ですが、このカーネルにはありません。"
        "コースのコピー（git clone またはダウンロード）から、セルで "
        "`%pip install <コピーのパス>` を実行してインストールしてください。"
        "このカーネルの torch が {torch} なら、それをそのまま使います。"
        "または、コピーの中で `make lab` を実行してください。"
    ) from None""",
    },
}
# A translated edition's notebooks (solutions/ja, lessons/ja) speak their language: the checks'
# and the launcher's messages, in the kernel and in its ranks. DDP_HELPERS_LANG overrides it.
LANGUAGE_TAG = "course-language"
LANGUAGE_CELL = {
    "ja": """\
# このノートブックの言語: チェックとランチャーのメッセージを日本語にする
# （Jupyter の起動前に DDP_HELPERS_LANG=en を設定すれば英語になる）
import ddp_helpers

ddp_helpers.use_language("ja")""",
}
README_START = "<!-- lesson badges: python -m ddp_helpers build writes them -->"
README_END = "<!-- end of lesson badges -->"


class BuildError(Exception):
    """A solution notebook that cannot be turned into a lesson; the message says where."""


def strip_solutions(source: str, regions: Regions, where: tuple[str, int], lang="en") -> str:
    """The cell's source with each solution region replaced by its stub (stubs.Regions
    numbers them, across the notebook's cells), in the notebook's language."""
    out = []
    try:
        for piece in regions.walk(source):
            if isinstance(piece, str):
                out.append(piece)
            else:
                out.append(stub_line(piece.exercise, piece.indent, lang))
    except RegionError as exc:
        raise BuildError(
            AUTHOR_TEXT[exc.kind].format(nb=where[0], cell=where[1], line=exc.line)
        ) from None
    return "\n".join(out)


def make_lesson(nb, name: str):
    """The learner's notebook: stubs for solutions, no solution-only cells, no outputs."""
    lesson = copy.deepcopy(nb)
    number = exercise_prefix(lesson_of_notebook(name))
    lang = lesson.metadata.get("language", "en")  # a translated edition's stubs speak it
    cells, regions = [], Regions(number)
    for index, cell in enumerate(lesson.cells, 1):
        if DROP_TAG in cell.get("metadata", {}).get("tags", []):
            continue
        if cell.cell_type == "code":
            cell.source = strip_solutions(cell.source, regions, (name, index), lang)
            cell.outputs = []
            cell.execution_count = None
            cell.metadata.pop("execution", None)
        cells.append(cell)
    lesson.cells = cells
    return lesson, regions.count


def add_course_cells(lesson, name: str, repository, torch: str, folder: str = "lessons") -> None:
    """Put the badges (with a repository) and the set-up cell after the lesson's title."""
    v4 = _nbformat().v4
    cells = []
    lang = folder.removeprefix("lessons").strip("/") or "en"
    install, from_copy = SETUP_INSTALL, SETUP_FROM_COPY
    if lang in SETUP_TRANSLATED:
        install, from_copy = SETUP_TRANSLATED[lang]["install"], SETUP_TRANSLATED[lang]["from_copy"]
    if repository is not None:
        cells.append(v4.new_markdown_cell(repository.badges(f"{folder}/{name}")))
        cells[-1].metadata["tags"] = [BADGES_TAG]
        setup = install.format(requirement=repository.requirement, torch=torch)
    else:
        setup = from_copy.format(torch=torch)
    cells.append(v4.new_code_cell(setup))
    cells[-1].metadata["tags"] = [SETUP_TAG]
    for cell in cells:  # the same ids at every build (nbformat's own are random)
        tag = cell.metadata["tags"][0].removeprefix("course-")
        cell["id"] = f"{lesson_of_notebook(name)}-{tag}"
    lesson.cells[1:1] = cells


def readme_badges(readme: str, repository, names: list[str]) -> str | None:
    """README.md with its badge block rewritten; None when it has no block."""
    if README_START not in readme or README_END not in readme:
        return None
    lines = []
    if repository is not None:
        lines = ["", "| lesson | Colab | Kaggle |", "| --- | --- | --- |"]
        for name in names:
            path = f"lessons/{name}"
            colab = f"[![Open In Colab]({links.COLAB_BADGE})]({repository.colab(path)})"
            kaggle = f"[![Open in Kaggle]({links.KAGGLE_BADGE})]({repository.kaggle(path)})"
            lines.append(f"| `{Path(name).stem}` | {colab} | {kaggle} |")
        lines.append("")
    head, rest = readme.split(README_START, 1)
    _, tail = rest.split(README_END, 1)
    return head + README_START + "\n".join(lines) + "\n" + README_END + tail


def _solutions(folder: Path) -> list[Path]:
    found = sorted(p for p in folder.glob(NOTEBOOKS))
    if not found:
        raise BuildError(AUTHOR_TEXT["no_solutions"].format(folder=folder))
    return found


def _extra_notebooks(names: set[str], solutions: Path, lessons: Path, editions) -> list[str]:
    """A lesson (or an edition's notebook) with no solution to be built from."""
    problems = []
    folders = [lessons] + [f / lang for lang in editions for f in (lessons, solutions)]
    for folder in folders:
        for extra in sorted(p.name for p in folder.glob(NOTEBOOKS)):
            if extra not in names:
                base, path = solutions.parent, folder / extra
                shown = path.relative_to(base) if path.is_relative_to(base) else path
                problems.append(
                    AUTHOR_TEXT["extra"].format(path=Path(shown).as_posix(), name=extra)
                )
    return problems


def build_lessons(
    solutions: Path,
    lessons: Path,
    check: bool = False,
    listed: set[str] | None = None,
    *,
    pyproject: Path | None = None,
    readme: Path | None = None,
) -> list[str]:
    """Write `lessons` from `solutions`, or with check=True list what is out of date.

    `listed`: the notebook names the course's lessons must have; by default, for the
    project's own solutions/, those of the LESSONS registry. `pyproject`: where the
    repository's address is read (badges, install line), `readme`: whose badge block is
    written; by default, for the project's own lessons/, its pyproject.toml and README.md.
    """
    nbformat = _nbformat()
    own = Path(lessons).resolve() == ROOT / "lessons"  # as --lessons may name it
    pyproject = pyproject or (ROOT / "pyproject.toml" if own else None)
    readme = readme or (ROOT / "README.md" if own else None)
    try:
        repository = links.repository(pyproject) if pyproject else None
    except links.LinkError as exc:
        raise BuildError(str(exc)) from None
    torch = links.torch_range(pyproject or ROOT / "pyproject.toml")

    if listed is None and Path(solutions).resolve() == ROOT / "solutions":
        listed = {notebook_name(lesson) for lesson in LESSONS}
    # Translated editions: where the solutions' folder sits beside an i18n/ with translations.
    i18n = Path(solutions).parent / "i18n"
    editions = [lang for lang in translations.EDITIONS if (i18n / lang).is_dir()]
    problems = []
    names = set()
    for path in _solutions(solutions):
        names.add(path.name)
        if listed is not None and path.name not in listed:
            number = lesson_of_notebook(path)
            problems.append(AUTHOR_TEXT["unlisted"].format(name=path.name, number=number))
        nb = nbformat.read(path, as_version=4)
        problems += _write_lesson(nb, path.name, lessons, "lessons", repository, torch, check)
        for lang in editions:
            problems += _build_edition(
                nb, path.name, lang, (solutions, lessons), repository, torch, check
            )
    for name in sorted((listed or set()) - names):
        problems.append(AUTHOR_TEXT["unwritten"].format(name=name))
    problems += _extra_notebooks(names, Path(solutions), Path(lessons), editions)
    if own:
        problems += _copy_scripts(Path(lessons), check)
    if readme is not None:
        problems += _build_readme(readme, repository, sorted(names), check)
    if check and not problems:
        print(AUTHOR_TEXT["in_sync"].format(count=len(names)))
    return problems


# Scripts a lesson runs, shipped in the package (an installed course has no lessons/ folder)
# and copied into lessons/ for the learner to read and run from a checkout.
SCRIPTS = ("fsdp_train.py",)


def _copy_scripts(lessons: Path, check: bool) -> list[str]:
    """lessons/<script> for each of SCRIPTS, the package's copy; [problem] with check=True."""
    problems = []
    for name in SCRIPTS:
        text = (PACKAGE / "demos" / name).read_text(encoding="utf-8")
        target = lessons / name
        if check and target.exists() and target.read_text(encoding="utf-8") != text:
            problems.append(AUTHOR_TEXT["script_stale"].format(name=name))
        else:
            problems += _write(target, text, check, name)
    return problems


def _write(target: Path, text: str, check: bool, shown: str) -> list[str]:
    """Write `text` to `target`, or with check=True say how it differs; [problem] or []."""
    if check:
        if not target.exists():
            return [AUTHOR_TEXT["missing"].format(name=shown)]
        if target.read_text(encoding="utf-8") != text:
            return [AUTHOR_TEXT["stale"].format(name=shown)]
        return []
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    return []


def _write_lesson(nb, name: str, lessons: Path, folder: str, repository, torch, check) -> list:
    """The learner's notebook made from solution `nb` and written to lessons/<name>."""
    lesson, regions = make_lesson(nb, name)
    add_course_cells(lesson, name, repository, torch, folder)
    shown = name if folder == "lessons" else f"{folder.removeprefix('lessons/')}/{name}"
    problems = _write(lessons / name, _nbformat().writes(lesson) + "\n", check, shown)
    if not check:
        print(AUTHOR_TEXT["wrote"].format(name=shown, regions=regions))
    return problems


def _build_edition(english, name: str, lang: str, folders, repository, torch, check) -> list:
    """solutions/<lang>/<name> from the English and its translation, then its lesson.

    `folders`: (solutions, lessons), the English ones; the translations are in the i18n/
    beside them.
    """
    nbformat = _nbformat()
    solutions, lessons = folders
    target = solutions / lang / name
    previous = nbformat.read(target, as_version=4) if target.exists() else None
    edition = translations.make_edition(english, name, lang, solutions.parent, previous)
    if edition.notebook is None:
        return edition.problems
    add_language_cell(edition.notebook, name, lang)
    text = nbformat.writes(edition.notebook) + "\n"
    problems = edition.problems + _write(target, text, check, f"{lang}/{name}")
    return problems + _write_lesson(
        edition.notebook, name, lessons / lang, f"lessons/{lang}", repository, torch, check
    )


def add_language_cell(nb, name: str, lang: str) -> None:
    """After the title, the cell that makes the notebook's checks and launcher speak `lang`."""
    cell = _nbformat().v4.new_code_cell(LANGUAGE_CELL[lang])
    cell.metadata["tags"] = [LANGUAGE_TAG]
    cell["id"] = f"{lesson_of_notebook(name)}-language"
    previous = next((c for c in nb.cells if c.get("id") == cell["id"]), None)
    if previous is not None:  # keep what it printed last time (nothing)
        nb.cells.remove(previous)
    nb.cells.insert(1, cell)


def _build_readme(readme: Path, repository, names: list[str], check: bool) -> list[str]:
    text = readme.read_text(encoding="utf-8")
    new = readme_badges(text, repository, names)
    if new is None:
        if repository is None:
            return []  # nothing to show, and no place for it: fine
        return [AUTHOR_TEXT["readme_no_block"].format(start=README_START, end=README_END)]
    if check:
        return [AUTHOR_TEXT["readme_stale"]] if new != text else []
    if new != text:
        readme.write_text(new, encoding="utf-8")
        print(AUTHOR_TEXT["wrote_readme"].format(count=len(names) if repository else 0))
    return []


def execute_solutions(
    solutions: Path,
    timeout: int = 300,
    only: list[str] | None = None,
    languages: list[str] | None = None,
) -> None:
    """Run the solution notebooks (`only` these lessons) in fresh kernels; store outputs.

    A translated edition's notebooks (solutions/ja/) are run too when `solutions` holds them
    (`languages`: only these editions, "en" the English); their language cell makes them
    speak it.
    """
    nbformat = _nbformat()
    from nbclient import NotebookClient

    # The stored record must not depend on which rank printed first, nor on the language
    # the author's shell asks for: each notebook speaks its own (its language cell).
    os.environ["DDP_HELPERS_OUTPUT"] = "ordered"
    os.environ.pop("DDP_HELPERS_LANG", None)
    paths = _solutions(solutions) if not languages or "en" in languages else []
    for lang in translations.EDITIONS:
        if (solutions / lang).is_dir() and (not languages or lang in languages):
            paths += sorted((solutions / lang).glob(NOTEBOOKS))
    for path in paths:
        if only and lesson_of_notebook(path) not in only:
            continue
        nb = nbformat.read(path, as_version=4)
        started = time.monotonic()
        NotebookClient(
            nb,
            timeout=timeout,
            kernel_name="python3",
            resources={"metadata": {"path": str(path.parent)}},
        ).execute()
        for cell in nb.cells:
            cell.metadata.pop("execution", None)
        nbformat.write(nb, path)
        shown = path.relative_to(solutions).as_posix()
        print(AUTHOR_TEXT["executed"].format(name=shown, seconds=time.monotonic() - started))
