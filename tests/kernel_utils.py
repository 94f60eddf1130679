"""Run cells in a real Jupyter kernel, as JupyterLab and nbval do."""

from __future__ import annotations

import nbformat
import psutil
from nbclient import NotebookClient


def run_cells(*sources: str, timeout: int = 120) -> list:
    """Execute the cells in one fresh kernel; return each cell's outputs (errors allowed)."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in sources]
    NotebookClient(nb, timeout=timeout, allow_errors=True, kernel_name="python3").execute()
    return [cell.outputs for cell in nb.cells]


def stream_text(outputs, name: str = "stdout") -> str:
    return "".join(o["text"] for o in outputs if o["output_type"] == "stream" and o["name"] == name)


def error_of(outputs):
    errors = [o for o in outputs if o["output_type"] == "error"]
    return errors[0] if errors else None


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return [p for p in psutil.Process(pid).children(recursive=True) if p.is_running()]
    except psutil.NoSuchProcess:
        return []


def shown(error) -> str:
    """What JupyterLab shows for an error output: its traceback lines (the full report)."""
    import re

    return re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(error["traceback"]))
