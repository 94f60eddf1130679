"""A lesson's training code as a torchrun script: `python -m ddp_helpers export` (lesson 04)."""

from __future__ import annotations

import ast
from pathlib import Path

EXPORT_TAG = "export"

MESSAGES = {
    "no_cells": (
        "{nb} has no cells tagged `export`, so there is nothing to write. Tag the cells that "
        "make up the script (JupyterLab: the gear icon, Common Tools, Cell Tags)."
    ),
    "not_done": (
        "{nb}: exercise {exercise} is not done yet (its cell still says `raise "
        "NotImplementedError`), and the script needs it. Finish it, then export again."
    ),
    "syntax": "{nb}: an exported cell does not compile: {error}",
    "no_main": "{nb}: the exported cells define no `main()` for the script to run.",
    "wrote": (
        "wrote {out} ({cells} cells); run it with: torchrun --standalone --nproc-per-node 2 {out}"
    ),
}

HEADER = '''"""Training script exported from {nb} by `python -m ddp_helpers export`.

Start it with torchrun, which sets RANK, LOCAL_RANK, LOCAL_WORLD_SIZE and WORLD_SIZE:
    torchrun --standalone --nproc-per-node 2 {name}
"""
'''


class ExportError(Exception):
    """The notebook cannot be exported; the message says why and what to do."""


def _is_magic(line: str) -> bool:
    return line.lstrip().startswith(("%", "!"))


def export_script(notebook: Path, name: str = "train.py") -> tuple[str, int]:
    """The script's source (to be saved as `name`), and how many cells went into it."""
    from ..nbformat_quick import nbformat as _nbformat

    nbformat = _nbformat()

    nb = nbformat.read(notebook, as_version=4)
    cells = [
        c for c in nb.cells if c.cell_type == "code" and EXPORT_TAG in c.metadata.get("tags", [])
    ]
    if not cells:
        raise ExportError(MESSAGES["no_cells"].format(nb=notebook))
    imports, bodies = [], []
    for cell in cells:
        source = "\n".join(line for line in cell.source.splitlines() if not _is_magic(line))
        try:
            tree = ast.parse(source)
        except SyntaxError as exc:
            raise ExportError(MESSAGES["syntax"].format(nb=notebook, error=exc)) from None
        for node in ast.walk(tree):
            stub = _stub_exercise(node)
            if stub:
                raise ExportError(MESSAGES["not_done"].format(nb=notebook, exercise=stub))
        lines = source.splitlines()
        taken = set()
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                text = "\n".join(lines[node.lineno - 1 : node.end_lineno])
                if text not in imports:
                    imports.append(text)
                taken.update(range(node.lineno - 1, node.end_lineno))
        body = "\n".join(line for i, line in enumerate(lines) if i not in taken).strip()
        if body:
            bodies.append(body)
    if not any(
        isinstance(n, ast.FunctionDef) and n.name == "main"
        for body in bodies
        for n in ast.parse(body).body
    ):
        raise ExportError(MESSAGES["no_main"].format(nb=notebook))
    script = (
        HEADER.format(nb=Path(notebook).name, name=name)
        + "\n"
        + _import_block(imports)
        + "\n\n\n"
        + "\n\n\n".join(bodies)
        + '\n\n\nif __name__ == "__main__":\n    main()\n'
    )
    compile(script, name, "exec")
    return script, len(cells)


def _stub_exercise(node) -> str | None:
    if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
        func, args = node.exc.func, node.exc.args
        if getattr(func, "id", None) == "NotImplementedError" and args:
            text = getattr(args[0], "value", "")
            if isinstance(text, str) and text.startswith("exercise "):
                return text.split(" ", 1)[1]
    return None


def _import_block(imports: list[str]) -> str:
    # Standard library first, then the rest, as isort lays them out.
    import sys

    def group(line: str) -> int:
        first = line.split()[1].split(".")[0].rstrip(",")  # `import os, sys` names os first
        return 0 if first in sys.stdlib_module_names else 1

    groups = [
        sorted((i for i in imports if group(i) == g), key=lambda i: (i.startswith("from"), i))
        for g in (0, 1)
    ]
    return "\n\n".join("\n".join(g) for g in groups if g)


def export(notebook: str, out: str) -> str:
    """Write the script; return the line to print."""
    script, cells = export_script(Path(notebook), Path(out).name)
    Path(out).write_text(script, encoding="utf-8")
    return MESSAGES["wrote"].format(out=out, cells=cells)
