"""Files the grader writes (the CSV, feedback, results.json, the report, a zip): each made
whole beside its place and then moved there, so a reader never sees half of one."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


@contextlib.contextmanager
def replaced_whole(path, mode: str = "w", **open_args):
    """A file to write `path`'s new content into; it replaces `path` only once complete.

    Opened as open(mode, **open_args) at `path` + ".tmp"; on an error the old file stays
    and the partial one is removed.
    """
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, mode, **open_args) as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
