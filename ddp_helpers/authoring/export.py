"""A lesson's training code as a torchrun script: `python -m ddp_helpers export` (lesson 04).

The cells tagged `export` make the script, in the notebook's order: their imports first
(the course's own `ddp_helpers` left out: a script on a cluster does not need it), then
the rest, then `main()` called. Authoring marks (`# BEGIN SOLUTION`) are left out too.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

from .. import i18n
from ..exercises import lesson_of_exercise, lesson_of_notebook
from ..i18n import messages
from ..nbformat_quick import nbformat as _nbformat
from ..stubs import BEGIN, END, exercise_in

EXPORT_TAG = "export"
COURSE_PACKAGE = "ddp_helpers"

MESSAGES = messages(
    "authoring.export",
    {
        "no_cells": (
            "{nb} has no cells tagged `export`, so there is nothing to write. Tag the cells that "
            "make up the script (JupyterLab: the gear icon, Common Tools, Cell Tags)."
        ),
        "not_done": (
            "{nb}: the script needs {missing}, still `raise NotImplementedError(...)` in this "
            "notebook. {what}, then export again."
        ),
        "exercise": "exercise {ids}",
        "exercises": "exercises {ids}",
        "pasted": "{which} from lesson {lesson}",
        "finish": "Finish it",
        "finish_all": "Finish them",
        "paste": "Paste your answers from the earlier lessons into this notebook's cell for them",
        "finish_and_paste": (
            "Finish this lesson's, paste your answers from the earlier lessons into this "
            "notebook's cell for them"
        ),
        "syntax": "{nb}: an exported cell does not compile: {error}",
        "no_main": "{nb}: the exported cells define no `main()` for the script to run.",
        "wrote": (
            "wrote {out} ({cells} cells); run it with: "
            "torchrun --standalone --nproc-per-node 2 {out}"
        ),
        "wrote_slurm": "wrote {out}: a SLURM job for it; submit it with: sbatch {out}",
        "wrote_kubernetes": (
            "wrote {out}: a Kubeflow {kind} for it (set its image); apply it with: "
            "kubectl apply -f {out}"
        ),
    },
)

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
    nbformat = _nbformat()

    nb = nbformat.read(notebook, as_version=4)
    cells = [
        c for c in nb.cells if c.cell_type == "code" and EXPORT_TAG in c.metadata.get("tags", [])
    ]
    if not cells:
        raise ExportError(MESSAGES["no_cells"].format(nb=notebook))
    imports, bodies, stubs = [], [], []
    for cell in cells:
        source = "\n".join(
            line
            for line in cell.source.splitlines()
            if not _is_magic(line) and not (BEGIN.match(line) or END.match(line))
        )
        try:
            tree = ast.parse(source)
        except SyntaxError as exc:
            raise ExportError(MESSAGES["syntax"].format(nb=notebook, error=exc)) from None
        lines = source.splitlines()
        stubs += [s for s in map(exercise_in, lines) if s and s not in stubs]
        taken = set()
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                text = "\n".join(lines[node.lineno - 1 : node.end_lineno])
                if text not in imports and not _from_the_course(node):
                    imports.append(text)
                taken.update(range(node.lineno - 1, node.end_lineno))
        body = "\n".join(line for i, line in enumerate(lines) if i not in taken).strip()
        if body:
            bodies.append(body)
    if stubs:
        raise ExportError(_not_done(notebook, stubs))
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


def _from_the_course(node) -> bool:
    """An import of the course's own package, which the script does not need."""
    if isinstance(node, ast.ImportFrom):
        names = [node.module or ""] if node.level == 0 else [COURSE_PACKAGE]
    else:
        names = [alias.name for alias in node.names]
    return all(name.split(".")[0] == COURSE_PACKAGE for name in names)


def _listed(ids: list[str]) -> str:
    return MESSAGES["exercise" if len(ids) == 1 else "exercises"].format(ids=i18n.and_listed(ids))


def _not_done(notebook: Path, stubs: list[str]) -> str:
    """Which exercises the script still needs; an earlier lesson's answers are pasted in."""
    lesson = lesson_of_notebook(notebook)
    own = [s for s in stubs if lesson_of_exercise(s) == lesson]
    earlier: dict[str, list[str]] = {}
    for stub in stubs:
        if stub not in own:
            earlier.setdefault(lesson_of_exercise(stub), []).append(stub)
    parts = [_listed(own)] if own else []
    parts += [
        MESSAGES["pasted"].format(which=_listed(ids), lesson=other)
        for other, ids in sorted(earlier.items())
    ]
    missing = i18n.and_listed(parts, groups=True)
    if earlier:
        what = MESSAGES["finish_and_paste" if own else "paste"]
    else:
        what = MESSAGES["finish" if len(own) == 1 else "finish_all"]
    return MESSAGES["not_done"].format(nb=notebook, missing=missing, what=what)


def _import_block(imports: list[str]) -> str:
    # Standard library first, then the rest, as isort lays them out.
    def group(line: str) -> int:
        first = line.split()[1].split(".")[0].rstrip(",")  # `import os, sys` names os first
        return 0 if first in sys.stdlib_module_names else 1

    groups = [
        sorted((i for i in imports if group(i) == g), key=lambda i: (i.startswith("from"), i))
        for g in (0, 1)
    ]
    return "\n\n".join("\n".join(g) for g in groups if g)


# The files that run the script on a cluster, beside it (ddp_helpers/authoring/cluster/):
# what each becomes, named after the script (train.py: train.sbatch, ...).
CLUSTER = Path(__file__).with_name("cluster")
SLURM = {"slurm.sbatch": ".sbatch"}
KUBERNETES = {"pytorchjob.yaml": ".pytorchjob.yaml", "trainjob.yaml": ".trainjob.yaml"}
KINDS = {"pytorchjob.yaml": "PyTorchJob", "trainjob.yaml": "TrainJob"}


def job_name(script: str) -> str:
    """The job's name from the script's: what SLURM shows and Kubernetes accepts (lower
    case letters, digits and '-')."""
    return re.sub(r"[^a-z0-9]+", "-", Path(script).stem.lower()).strip("-") or "train"


def cluster_file(template: str, script: str) -> str:
    """A cluster file for `script` (its name: the file sits beside it)."""
    text = (CLUSTER / template).read_text(encoding="utf-8")
    return text.replace("@SCRIPT@", Path(script).name).replace("@JOB@", job_name(script))


def export(notebook: str, out: str, slurm: bool = False, kubernetes: bool = False) -> str:
    """Write the script, and with `slurm` / `kubernetes` the files that run it on such a
    cluster, beside it; return the lines to print."""
    script, cells = export_script(Path(notebook), Path(out).name)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(script, encoding="utf-8")
    said = [MESSAGES["wrote"].format(out=out, cells=cells)]
    companions = {**(SLURM if slurm else {}), **(KUBERNETES if kubernetes else {})}
    for template, suffix in companions.items():
        path = Path(out).with_name(Path(out).stem + suffix)
        path.write_text(cluster_file(template, out), encoding="utf-8")
        if suffix == ".sbatch":
            said.append(MESSAGES["wrote_slurm"].format(out=path))
        else:
            said.append(MESSAGES["wrote_kubernetes"].format(out=path, kind=KINDS[template]))
    return "\n".join(said)
