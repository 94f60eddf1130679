"""A package's names loaded when first used (PEP 562), so that importing one part of the
course does not load the rest: `from ddp_helpers import launch` works as ever."""

from __future__ import annotations

import importlib
import sys


def lazy_getattr(package: str, table: dict[str, str]):
    """The module `__getattr__` of `package` for `table`: name -> the submodule that has it."""

    def __getattr__(name):  # noqa: N807 - what the module calls it
        if name not in table:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{table[name]}"), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
