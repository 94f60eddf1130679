"""Headless Chromium for the tests, through Playwright: the system's Chromium (Debian's
`chromium` package, which `make test` installs as root), else Playwright's own.

No test that needs it skips: without a browser, it fails with `MISSING`, which says how
to get one.
"""

from __future__ import annotations

import contextlib
import shutil

MISSING = (
    "These tests look at pages in a real browser and found none. Install Chromium "
    "(Debian/Ubuntu: sudo apt-get install chromium; `make test` does this itself as root) "
    "or Playwright's own (.venv/bin/python -m playwright install chromium)."
)


def chromium_path() -> str | None:
    """The system's Chromium, or None (then Playwright's own, if installed, is used)."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


@contextlib.contextmanager
def browser():
    """A headless Chromium; fails the test with MISSING where there is none."""
    from playwright.sync_api import Error, sync_playwright

    with sync_playwright() as p:
        path = chromium_path()
        try:
            # --no-sandbox: Chromium's own sandbox refuses to start as root (CI, containers).
            b = p.chromium.launch(executable_path=path, args=["--no-sandbox"])
        except Error as exc:
            raise AssertionError(f"{MISSING}\n({str(exc).splitlines()[0]})") from None
        try:
            yield b
        finally:
            b.close()
