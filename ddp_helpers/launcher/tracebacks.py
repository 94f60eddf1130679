"""Tracebacks and stacks of the ranks, shown with the notebook's own cell names and lines."""

from __future__ import annotations

import functools
import importlib.util
import linecache
import os
import re
import sys

from .failures import MESSAGES

_CELL_FILE = re.compile(r'File "([^"]+)", line (\d+)')
_FH_FRAME = re.compile(r'^\s*File "(.*)", line (\d+) in (.*)$')
_FH_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-f]+)")
_LAUNCHER = os.path.dirname(os.path.abspath(__file__)) + os.sep


def is_internal(filename: str) -> bool:
    """True for the launcher's own files: their frames are not the learner's."""
    return os.path.abspath(filename).startswith(_LAUNCHER)


@functools.cache
def _torch_folder() -> str | None:
    """The folder torch is installed in (found without importing it), or None."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    return os.path.dirname(os.path.dirname(os.path.abspath(spec.origin))) + os.sep


def _torch_file(filename: str) -> str | None:
    """'torch/distributed/distributed_c10d.py' for a file of torch's own, else None."""
    folder = _torch_folder()
    path = os.path.abspath(filename)
    if folder and path.startswith(folder + "torch" + os.sep):
        return path[len(folder) :].replace(os.sep, "/")
    return None


def _ipython():
    if "IPython" not in sys.modules:
        return None
    try:
        return sys.modules["IPython"].get_ipython()
    except Exception:
        return None


def cell_label(filename: str) -> str | None:
    """'Cell In[3]' for a notebook cell's file name, as IPython writes it; else None."""
    ip = _ipython()
    if ip is None:
        return None
    try:
        label = ip.compile.format_code_name(filename)
    except Exception:
        return None
    return f"{label[0]} {label[1]}" if label else None


def relabel_cells(text: str) -> str:
    """A traceback's `File "<cell file>", line N` as `Cell In[k], line N`."""

    def sub(m):
        label = cell_label(m.group(1))
        return f"{label}, line {m.group(2)}" if label else m.group(0)

    return _CELL_FILE.sub(sub, text)


def parse_faulthandler(text: str) -> list[list[tuple[str, int, str]]]:
    """Thread stacks from faulthandler's dump, each most-recent-call-last."""
    threads, current = [], None
    for line in text.splitlines():
        if _FH_THREAD.match(line):
            current = []
            threads.append(current)
            continue
        m = _FH_FRAME.match(line)
        if m and current is not None:
            current.append((m.group(1), int(m.group(2)), m.group(3).strip()))
    return [list(reversed(frames)) for frames in threads]


def render_stack(text: str) -> str:
    """faulthandler's dump rendered like a Python traceback, with source lines.

    Consecutive frames inside torch make one line (`_torch_line`): the learner reads which
    collective a rank waits in, not torch's code or where this machine installed it.
    """
    out = []
    for frames in parse_faulthandler(text):
        # A rank is forked from the zygote, so its stack starts in the zygote's own frames:
        # drop that prefix, and the launcher's frames further up (its rendezvous hook).
        start = 0
        while start < len(frames) and (
            is_internal(frames[start][0]) or frames[start][0].startswith("<frozen")
        ):
            start += 1
        frames = [f for f in frames[start:] if not is_internal(f[0])]
        if not frames:
            continue
        if out:
            out.append("  (another thread)")
        torch_run: list[tuple[str, int, str]] = []  # consecutive frames inside torch
        for i, (filename, lineno, name) in enumerate(frames):
            inside = _torch_file(filename)
            if inside:
                torch_run.append((inside, lineno, name))
                following = frames[i + 1][0] if i + 1 < len(frames) else None
                if following is None or not _torch_file(following):
                    out.append(_torch_line(torch_run))
                    torch_run = []
                continue
            label = cell_label(filename)
            where = f"{label}, line {lineno}" if label else f'File "{filename}", line {lineno}'
            out.append(f"  {where}, in {name}")
            source = linecache.getline(filename, lineno).strip()
            if source:
                out.append(f"    {source}")
    return "\n".join(out)


def _torch_line(run: list[tuple[str, int, str]]) -> str:
    """Frames inside torch as one line: the functions called, then where the last one is
    (torch's file, named from its folder: not torch's code, nor where it is installed)."""
    file, lineno, _ = run[-1]
    calls = " > ".join(name for _, _, name in run)
    return "  " + MESSAGES["in_torch"].format(calls=calls, file=file, line=lineno)


def cell_sources() -> dict:
    """The in-memory sources of this kernel's cells, for tracebacks in the ranks."""
    return {
        name: entry[2]
        for name, entry in list(linecache.cache.items())
        if len(entry) == 4 and entry[1] is None and entry[2]
    }
