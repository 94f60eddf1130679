"""nbformat, imported without a 1.7 s grammar it never uses.

Importing nbformat imports jsonschema, whose format checkers import `rfc3987_syntax` when
it is installed (Jupyter Server brings it); that module builds an IRI grammar at import,
1.7 s of CPU in every `grade`, `build` and `export` run. Jupyter's notebook schema has no
IRI formats, so jsonschema is imported here without that checker (in that process, a
jsonschema FormatChecker then checks no "iri" formats; nothing here asks it to).
"""

from __future__ import annotations

import sys


def nbformat():
    """The nbformat module (imported quickly if jsonschema is not imported yet)."""
    if "jsonschema" in sys.modules:
        import nbformat as module

        return module
    blocked = "rfc3987_syntax" not in sys.modules
    if blocked:
        sys.modules["rfc3987_syntax"] = None  # an ImportError for jsonschema, which skips it
    try:
        import nbformat as module
    finally:
        if blocked and sys.modules.get("rfc3987_syntax", 0) is None:
            del sys.modules["rfc3987_syntax"]  # the module itself can still be imported
    return module
