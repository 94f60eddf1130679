"""`make setup`'s install into .venv: the lock's versions, with uv where it can, else pip.

    python tools/install.py VENV_PYTHON LOCK [--installer uv|pip]

pip takes about a minute to pick the lock's ~150 versions from every release each index
lists (on 2 cores, 72 s against 9 s for uv; docs/development.md). uv installs the same
versions from the same places: pip's own settings (`pip config list`: its files and the
`PIP_*` variables) are passed on where pip would take them: its indexes (`index-url`,
`extra-index-url`), `find-links`, `no-index`, `constraint` and `cert`; and uv picks among
all indexes as pip does (`--index-strategy unsafe-best-match`). If uv cannot be installed
or fails, pip installs everything, after one line saying so. Only the standard library
here: it runs before the course is installed.
"""

from __future__ import annotations

import argparse
import ast
import os
import subprocess
import sys

PROJECT = ["-e", ".[dev]"]
PIP_QUIET = ["--quiet", "--disable-pip-version-check"]


# pip's own order: its config files' [global] section, their [install] section over it, the
# PIP_* variables (`:env:` in `pip config list`) over both.
PRECEDENCE = {"global": 0, "install": 1, ":env:": 2}


def pip_settings(listed: str) -> dict[str, list[str]]:
    """`pip config list`'s output as {option: values} for `pip install`: what pip itself
    would use (PRECEDENCE); an option may hold several values."""
    found: dict[str, tuple[int, list[str]]] = {}
    for line in listed.splitlines():
        key, sep, value = line.partition("=")
        section, _, option = key.rpartition(".")
        if not sep or section not in PRECEDENCE:
            continue
        try:
            text = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            text = value
        rank = PRECEDENCE[section]
        if option not in found or found[option][0] <= rank:
            found[option] = (rank, str(text).split())
    return {option: values for option, (_, values) in found.items()}


def uv_options(settings: dict[str, list[str]]) -> tuple[list[str], dict[str, str]]:
    """uv's options for pip's settings, and what its environment needs (the certificates)."""
    args = ["--index-strategy", "unsafe-best-match"]
    for url in settings.get("index-url", [])[:1]:
        args += ["--index-url", url]
    for url in settings.get("extra-index-url", []):
        args += ["--extra-index-url", url]
    for place in settings.get("find-links", []):
        args += ["--find-links", place]
    for path in settings.get("constraint", []):
        args += ["--constraint", path]
    if settings.get("no-index", ["false"])[0].lower() in ("1", "true", "yes", "on"):
        args.append("--no-index")
    env = {}
    if settings.get("cert") and "SSL_CERT_FILE" not in os.environ:
        env["SSL_CERT_FILE"] = settings["cert"][0]
    return args, env


def with_uv(python: str, lock: str) -> bool:
    """The lock's versions installed by uv (itself pinned by the lock); False if that failed."""
    pip = [python, "-m", "pip", "install", *PIP_QUIET, "--no-compile", "-c", lock, "uv"]
    if subprocess.run(pip).returncode != 0:
        return False
    listed = subprocess.run(
        [python, "-m", "pip", "config", "list"], capture_output=True, text=True
    ).stdout
    args, env = uv_options(pip_settings(listed))
    command = [python, "-m", "uv", "pip", "install", "--quiet", "--python", python, *args]
    command += ["-c", lock, *PROJECT]
    return subprocess.run(command, env=dict(os.environ, **env)).returncode == 0


def with_pip(python: str, lock: str) -> int:
    command = [python, "-m", "pip", "install", *PIP_QUIET, "--no-compile", "-c", lock]
    return subprocess.run(command + PROJECT).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("python", help="the Python of the virtual environment to install into")
    parser.add_argument("lock", help="the versions to install (constraints.txt)")
    parser.add_argument("--installer", choices=("uv", "pip"), default="uv")
    args = parser.parse_args(argv)
    if args.installer == "uv":
        if with_uv(args.python, args.lock):
            return 0
        print("note: uv could not install the course; pip installs it instead", file=sys.stderr)
    return with_pip(args.python, args.lock)


if __name__ == "__main__":
    sys.exit(main())
