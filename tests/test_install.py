"""tools/install.py: pip's settings, as `pip config list` prints them, passed on to uv."""

from __future__ import annotations

import runpy

from support import ROOT

install = runpy.run_path(str(ROOT / "tools" / "install.py"))

# What `pip config list` prints on a machine like CI's: variables first, then the files.
LISTED = """\
:env:.cert='/etc/ssl/certs/ca-certificates.crt'
:env:.find-links='/opt/wheels'
global.cert='/etc/ssl/certs/ca-certificates.crt'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.find-links='/somewhere/else'
global.index-url='https://mirror.example/simple'
install.index-url='https://install.example/simple'
download.index-url='https://download.example/simple'
"""


def test_pip_settings_take_what_pip_install_would_use():
    settings = install["pip_settings"](LISTED)
    assert settings["find-links"] == ["/opt/wheels"]  # PIP_FIND_LINKS over the file
    assert settings["index-url"] == ["https://install.example/simple"]  # [install] over [global]
    assert settings["extra-index-url"] == [
        "file:///opt/pypi/simple",
        "file:///opt/pypi-more/simple",
    ]
    assert settings["constraint"] == ["/etc/xdg/pip/constraints.txt"]


def test_uv_gets_the_same_indexes_links_and_constraints_and_picks_as_pip_does(monkeypatch):
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    args, env = install["uv_options"](install["pip_settings"](LISTED))
    assert args == [
        "--index-strategy", "unsafe-best-match",
        "--index-url", "https://install.example/simple",
        "--extra-index-url", "file:///opt/pypi/simple",
        "--extra-index-url", "file:///opt/pypi-more/simple",
        "--find-links", "/opt/wheels",
        "--constraint", "/etc/xdg/pip/constraints.txt",
    ]  # fmt: skip
    assert env == {"SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt"}


def test_no_index_and_nothing_set():
    args, _ = install["uv_options"](install["pip_settings"]("global.no-index='true'\n"))
    assert args[-1] == "--no-index"
    assert install["uv_options"]({}) == (["--index-strategy", "unsafe-best-match"], {})
