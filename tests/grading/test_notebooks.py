"""Reading a submitted notebook (grading/notebooks.py, nbformat_quick.py): the worker's
plain reading of code cells, and nbformat imported without its slow grammar."""

from __future__ import annotations

import os
import subprocess
import sys

import nbformat

from ddp_helpers.grading import notebooks
from ddp_helpers.procs import with_this_package
from support import ROOT


def test_the_workers_plain_reading_of_code_cells_matches_nbformat():

    for path in sorted(ROOT.glob("*/0*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        want = [c.source for c in nb.cells if c.cell_type == "code"]
        assert notebooks.code_sources(path) == want, path


def test_nbformat_imported_quickly_still_validates_and_leaves_the_iri_checker_importable():
    code = (
        "import sys\n"
        "from ddp_helpers.nbformat_quick import nbformat\n"
        "nb = nbformat()\n"
        "nb.validate(nb.v4.new_notebook())\n"
        "bad = nb.v4.new_notebook(); bad.cells = [{'cell_type': 'code'}]\n"
        "try:\n"
        "    nb.validate(bad)\n"
        "except nb.ValidationError:\n"
        "    print('rejected')\n"
        "print('slow grammar imported:', 'rfc3987_syntax' in sys.modules)\n"
        "import rfc3987_syntax\n"
        "print(rfc3987_syntax.is_valid_syntax('iri', 'https://example.org/a'))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=with_this_package(dict(os.environ)),
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["rejected", "slow grammar imported: False", "True"]
