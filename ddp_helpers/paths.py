"""Where the course's files are, in one place: the package, and the repository around it.

Run from a checkout (or an editable install), ROOT holds solutions/, lessons/, i18n/ and
pyproject.toml; an installed wheel has the package alone, and what needs the repository
says so when it is not there.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent  # ddp_helpers/
ROOT = PACKAGE.parent  # the repository, when the package sits in one
