"""The course's last page (lessons/recipe.md, lessons/ja/recipe.md) and its script
(lessons/ddp_recipe.py, lessons/ja/ddp_recipe.py): the script runs under torchrun as the
page says; the page's code is the script's; each bug of its table links to a lesson cell
that holds the phrase the row quotes; the Japanese script is the English one but for its
comments; and JupyterLab shows the page rendered, its links going to the cells."""

from __future__ import annotations

import importlib.util
import io
import os
import re
import shutil
import subprocess
import sys
import tokenize
from pathlib import Path

import nbformat
import pytest

from ddp_helpers.authoring.website import CELL_LINK, RECIPE, RECIPE_SCRIPT, cell_links
from support import ROOT

EDITIONS = {"en": ROOT / "lessons", "ja": ROOT / "lessons" / "ja"}
EPOCHS = 5  # the script's default, which the page's output shows
# The bugs the page must list, by the cell that shows each: a collective inside
# `if rank == 0:`, no set_epoch, saving on LOCAL_RANK 0, `module.` keys, the GPU from RANK,
# the global batch on every rank, the sampler's padding counted, no destroy_process_group.
REQUIRED_CELLS = {"04-61", "04-11", "01-13", "04-e5", "01-08", "03-18", "04-06", "04-e10"}
STEP = {"en": "# Step {n} · ", "ja": "# ステップ {n} · "}
# A row of the bugs table: four columns, the last a link to a lesson's cell and a phrase.
ROW = re.compile(r"^\| (?P<bug>.+?) \| (?P<see>.+?) \| (?P<fix>.+?) \| (?P<where>.+) \|$")
WHERE = re.compile(CELL_LINK.pattern + r": (?P<phrase>.+)$")
# torchrun on 2 ranks of this machine, its store and the ranks on the loopback interface.
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
TORCHRUN += ["--local-addr", "127.0.0.1"]


def _page(lang: str) -> str:
    return (EDITIONS[lang] / RECIPE).read_text(encoding="utf-8")


def _script(lang: str) -> Path:
    return EDITIONS[lang] / RECIPE_SCRIPT


def _cells(lang: str, notebook: str) -> dict[str, str]:
    nb = nbformat.read(EDITIONS[lang] / notebook, as_version=4)
    return {cell.get("id"): cell.source for cell in nb.cells}


def _unquoted(phrase: str) -> str:
    """A phrase as the cell holds it: `code`, "text" or 「Japanese text」, the quotes off."""
    for left, right in (("`", "`"), ('"', '"'), ("「", "」")):
        if len(phrase) > 1 and phrase.startswith(left) and phrase.endswith(right):
            return phrase[1:-1]
    raise AssertionError(f'a phrase in `backticks`, "quotes" or 「」: {phrase}')


def rows(lang: str) -> list[dict]:
    """The bugs table's rows: bug, symptom, fix, notebook, cell, phrase."""
    found = []
    for line in _page(lang).splitlines():
        match = ROW.match(line)
        if not match or set(match["bug"]) <= {"-", " "} or match["bug"] in ("bug", "バグ"):
            continue
        where = WHERE.match(match["where"])
        assert where, f"{lang}: not [cell](NN_x.ipynb#cell-id=ID): phrase, last: {line}"
        notebook = f"{where['notebook']}.ipynb"
        phrase = _unquoted(where["phrase"]).replace("\\|", "|")
        found.append({**match.groupdict(), "notebook": notebook, "cell": where["cell"],
                      "text": where["text"], "phrase": phrase})  # fmt: skip
    return found


@pytest.mark.parametrize("lang", EDITIONS)
def test_every_bug_links_to_a_lesson_cell_that_holds_the_phrase_it_quotes(lang):
    table = rows(lang)
    assert REQUIRED_CELLS <= {row["cell"] for row in table}, "a classic bug is missing"
    wrong = []
    for row in table:
        cells = _cells(lang, row["notebook"])
        if row["text"] != row["cell"]:
            wrong.append(f"{row['cell']}: the link says {row['text']!r}")
        elif row["cell"] not in cells:
            wrong.append(f"{row['notebook']} has no cell {row['cell']}")
        elif row["phrase"] not in cells[row["cell"]]:
            wrong.append(f"{row['notebook']} {row['cell']} does not hold {row['phrase']!r}")
    assert not wrong, f"lessons/{'' if lang == 'en' else lang + '/'}{RECIPE}:\n" + "\n".join(wrong)


def test_both_editions_list_the_same_bugs_by_the_same_cells():
    assert [r["cell"] for r in rows("ja")] == [r["cell"] for r in rows("en")]


@pytest.mark.parametrize("lang", EDITIONS)
def test_every_link_of_the_page_resolves_in_the_lessons(lang):
    links = cell_links(_page(lang))
    assert len(links) > len(rows(lang)), "the steps link to the lessons too"
    missing = [f"{nb}#{cell}" for nb, cell in links if cell not in _cells(lang, nb)]
    assert not missing
    folder = EDITIONS[lang]
    for target in re.findall(r"\]\(([^)#\s]+)\)", _page(lang)):  # the script, the other edition
        assert (folder / target).is_file(), target


def _code(path: Path) -> list[tuple[int, str]]:
    """The script's tokens without its comments, blank lines and module docstring."""
    tokens = list(tokenize.generate_tokens(io.StringIO(path.read_text()).readline))
    skip = {tokenize.COMMENT, tokenize.NL}
    kept = [(t.type, t.string) for t in tokens if t.type not in skip]
    assert kept[0][0] == tokenize.STRING, "the script opens with its docstring"
    return kept[1:]


def test_the_japanese_script_is_the_english_one_but_for_its_comments():
    assert _code(_script("ja")) == _code(_script("en"))


def _stripped(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


@pytest.mark.parametrize("lang", EDITIONS)
def test_the_page_numbers_the_scripts_seven_steps_and_shows_its_own_lines(lang):
    script = _script(lang).read_text()
    marks = [script.find(STEP[lang].format(n=n)) for n in range(1, 8)]
    assert all(m >= 0 for m in marks) and marks == sorted(marks), "steps 1 to 7, in order"
    headings = re.findall(r"^### (\d) · ", _page(lang), re.M)
    assert headings == [str(n) for n in range(1, 8)]
    lines = _stripped(script)
    blocks = re.findall(r"```python\n(.*?)```", _page(lang), re.S)
    assert len(blocks) == 7, "a block of the script's code under each step"
    for block in blocks:
        piece = _stripped(block)
        starts = [i for i in range(len(lines)) if lines[i : i + len(piece)] == piece]
        assert starts, f"not the script's lines, as they stand there:\n{block}"


def _shown_output(lang: str) -> list[str]:
    block = re.search(r"```text\n(.*?)```", _page(lang), re.S)
    return block.group(1).splitlines()


def _spy(folder: Path) -> Path:
    """A script that runs the recipe as torchrun would, noting each torch.save's rank."""
    spy = folder / "spy.py"
    spy.write_text(
        "import os, runpy, sys, torch\n"
        "save = torch.save\n"
        "def noted(obj, f, *args, **kwargs):\n"
        "    with open(os.environ['SAVES'], 'a') as log:\n"
        "        log.write(os.environ['RANK'] + ' ' + str(f) + '\\n')\n"
        "    return save(obj, f, *args, **kwargs)\n"
        "torch.save = noted\n"
        "sys.argv = sys.argv[1:]\n"
        "runpy.run_path(sys.argv[0], run_name='__main__')\n"
    )
    return spy


def test_the_script_trains_under_torchrun_and_rank_0_alone_saves_the_plain_model(tmp_path):
    """What a user sees: a loss line per epoch from rank 0 only (`--tee 3` labels each
    line with its rank), the loss going down, the lines the page shows; one checkpoint,
    written by global rank 0, that a plain model loads strictly; exit code 0."""
    checkpoint, saves = tmp_path / "recipe_checkpoint.pt", tmp_path / "saves.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH", "MASTER_"))}
    env.update(OMP_NUM_THREADS="1", SAVES=str(saves))
    spy, script = str(_spy(tmp_path)), str(_script("en"))
    command = [*TORCHRUN, "--tee", "3", spy, script, "--checkpoint", checkpoint.name]
    done = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stdout + done.stderr
    said = re.findall(r"^\[default(\d)\]:(.*)$", done.stdout, re.M)
    assert {rank for rank, _ in said} == {"0"}, done.stdout
    lines = [line for _, line in said]
    for lang in EDITIONS:
        assert lines == _shown_output(lang), f"the {lang} page shows another output"
    shown = "\n".join(lines)
    losses = [float(x) for x in re.findall(r"^epoch \d+: mean loss ([\d.]+)$", shown, re.M)]
    assert len(losses) == EPOCHS, lines
    assert all(b < a for a, b in zip(losses, losses[1:], strict=False)), losses
    assert saves.read_text().splitlines() == [f"0 {checkpoint.name}"]
    spec = importlib.util.spec_from_file_location("ddp_recipe", _script("en"))
    recipe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipe)  # its main() runs only as a script
    import torch

    state = torch.load(checkpoint, weights_only=True)
    assert not any(key.startswith("module.") for key in state)
    recipe.make_model().load_state_dict(state)  # strict


def test_a_collective_under_rank_0_fails_fast_once_the_other_rank_has_left(tmp_path):
    """The table's first row: rank 0 alone all-reduces while rank 1 leaves the group and
    exits; gloo then fails on rank 0 ("Connection reset by peer", or "closed"), long before
    the group's timeout."""
    script = tmp_path / "bug.py"
    script.write_text(
        "import datetime, torch, torch.distributed as dist\n"
        "dist.init_process_group('gloo', timeout=datetime.timedelta(seconds=60))\n"
        "loss = torch.tensor(1.0)\n"
        "if dist.get_rank() == 0:\n"
        "    dist.all_reduce(loss)\n"
        "dist.destroy_process_group()\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH", "MASTER_"))}
    command = [*TORCHRUN, str(script)]
    done = subprocess.run(
        command, cwd=tmp_path, env=env | {"OMP_NUM_THREADS": "1"}, capture_output=True,
        text=True, timeout=50,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode != 0
    failed = r"\[rank0\]: RuntimeError: .*Connection (reset|closed) by peer"
    assert re.search(failed, output), output


# ---------------------------------------------------------------- in JupyterLab


@pytest.mark.browser
def test_jupyterlab_shows_the_page_rendered_and_its_links_reach_the_cells(tmp_path):
    """The course's settings open a Markdown file in Markdown Preview: the table rendered;
    a row's link opens the lesson, and goes to its cell once the lesson is open."""
    from browser import browser
    from lab_server import jupyter_server

    shutil.copytree(ROOT / "lessons", tmp_path / "lessons")  # nothing saved into the course
    with jupyter_server("lab", tmp_path, ROOT / "jupyter", "recipe") as base, browser() as b:
        page = b.new_page(viewport={"width": 1280, "height": 900})
        page.set_default_timeout(60_000)
        page.goto(f"{base}/lab/tree/lessons/{RECIPE}?reset&token=recipe")
        table = page.locator(".jp-RenderedMarkdown table tbody tr")
        table.first.wait_for()
        assert table.count() == len(rows("en"))
        row = rows("en")[0]
        cell = page.locator(".jp-NotebookPanel:visible .jp-Cell").filter(has_text=row["phrase"])
        for _ in range(2):  # the first click may open the lesson at its top
            page.locator(".lm-TabBar-tab", has_text=RECIPE).click()
            page.locator(".jp-RenderedMarkdown a", has_text=row["cell"]).click()
            cell.first.wait_for()
            page.wait_for_timeout(1000)
        box = cell.first.bounding_box()
        assert 0 <= box["y"] < 900, f"cell {row['cell']} not scrolled into view: {box}"
