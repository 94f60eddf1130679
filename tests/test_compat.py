"""benchmarks/compat.py's reading of the claims suite: which lesson sentence each failed test
is, and why it failed, as `make compat` prints them (the run itself installs other torch
releases: not part of `make test`)."""

from __future__ import annotations

import ast
import importlib.util
import sys

from support import ROOT


def _compat():
    spec = importlib.util.spec_from_file_location("compat", ROOT / "benchmarks" / "compat.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["compat"] = module  # its dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules["compat"]
    return module


def test_each_failed_claim_is_named_with_why_it_failed():
    output = (
        "FAILED tests/test_claims_ddp.py::test_buffers_are_broadcast[x-1] - TypeError: no 'a'\n"
        "FAILED tests/test_claims_ddp.py::test_buffers_are_broadcast[x-2] - TypeError: other\n"
        "FAILED tests/test_claims_basics.py::test_env_rendezvous\n"
        "1 failed, 2 passed in 3.0s\n"
    )
    assert _compat().failures(output) == {
        "test_buffers_are_broadcast": "TypeError: no 'a'",  # the first of its cases
        "test_env_rendezvous": "(no message)",
    }


def test_every_claim_row_names_a_test_the_copied_suite_holds():
    # A test renamed or moved out of the files compat copies would drop its claims from the
    # report without a word.
    compat = _compat()
    defined = set()
    for name in compat.CLAIMS_TESTS:
        tree = ast.parse((ROOT / "tests" / "claims" / name).read_text())
        defined |= {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    rows = compat.claim_rows()
    cited = (ROOT / "docs" / "claims.md").read_text().count("| test: tests/claims/")
    assert len(rows) == cited  # every claim whose evidence is a claims test
    assert {test for _, _, test in rows} <= defined
