"""`ex.qN.solution()` prints code a learner can paste into the lesson's notebook as it is:
no import of the course's own modules, and every name it uses is a builtin, its own, or
one the notebook's cells define (the learner's earlier answers among them)."""

from __future__ import annotations

import ast
import builtins
import json

import pytest

from ddp_helpers.exercises import LESSONS, exercises_of, notebook_name
from ddp_helpers.paths import ROOT


def _notebook_names(lesson: str) -> set[str]:
    """What the learner's notebook defines at its top level: imports, functions, classes,
    assignments (magic and shell lines left out)."""
    nb = json.loads((ROOT / "lessons" / notebook_name(lesson)).read_text())
    names: set[str] = set()
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        if source.startswith("%%"):
            continue
        lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
        names |= _bound(ast.parse("\n".join(lines)), top_only=True)
    return names


def _bound(tree: ast.AST, top_only: bool = False) -> set[str]:
    nodes = tree.body if top_only else list(ast.walk(tree))
    names = set()
    for node in nodes:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        binds = isinstance(node, ast.Assign | ast.AnnAssign | ast.For | ast.With)
        for target in ast.walk(node) if binds or not top_only else ():
            if isinstance(target, ast.Name) and isinstance(target.ctx, ast.Store):
                names.add(target.id)
    return names


EXERCISES = [(lesson, ex) for lesson in LESSONS for ex in exercises_of(lesson)]


@pytest.mark.parametrize("lesson, ex", EXERCISES, ids=[ex.id for _, ex in EXERCISES])
def test_the_printed_solution_pastes_into_its_notebook_as_it_is(lesson, ex):
    notebook = _notebook_names(lesson)
    source = ex.solution_source(namespace=dict.fromkeys(notebook))
    tree = ast.parse(source)
    relative = [
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level
    ]
    assert not relative, f"{ex.id}'s solution imports the course's own modules: {relative}"
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    missing = used - _bound(tree) - notebook - set(dir(builtins))
    assert not missing, f"{ex.id}'s solution uses names its notebook lacks: {sorted(missing)}"
