"""The reference tripwire: in a graded check's ranks, the course's own reference answer ends
the rank (FROM_COURSE_EXIT) if it is called, and an answer that carries its code is caught
before the harness runs it."""

from __future__ import annotations

import functools
import importlib
import os
import types

from ..launcher.plain import to_plain

FROM_COURSE_EXIT = 93  # how a rank ends whose answer ran the course's own reference


def in_rank(references, harness, answer, *args):
    """In a check's rank: harness(answer, *args), its value made plain data (to_plain: a
    learner's own object in it comes back as an Opaque). When grading (`references`: the
    exercise's reference answer), with the reference a tripwire (a call to it ends the
    rank, FROM_COURSE_EXIT, before the harness can judge) and the answer searched for the
    reference's code (re-homed into a function of its own, `types.FunctionType(ref.__code__,
    ...)`) first. A learner who reads this can still get past it; the checks are in the
    package a notebook can read (docs/instructors.md)."""

    keys: set[tuple] = set()
    for module, qualname in references:
        obj = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        for fn in _functions_of(obj):
            keys |= _code_keys(fn.__code__)
            if not fn.__code__.co_freevars:  # a closure's code cannot take the tripwire's
                fn.__code__ = _tripwire.__code__
    if references and _carries(answer, keys, set(), 4):
        os._exit(FROM_COURSE_EXIT)
    return to_plain(harness(answer, *args))


def _tripwire(*args, **kwargs):
    import os

    os._exit(93)  # FROM_COURSE_EXIT: the reference's code is replaced by this one's


def _functions_of(obj) -> list:
    """The functions of a reference: itself, or a class's methods (its own and nested)."""
    if isinstance(obj, types.FunctionType):
        return [obj]
    if isinstance(obj, type):
        found = []
        for value in vars(obj).values():
            value = getattr(value, "__func__", value)  # staticmethod, classmethod
            if isinstance(value, property):
                value = value.fget
            found += _functions_of(value) if isinstance(value, (types.FunctionType, type)) else []
        return found
    return []


def _code_keys(code: types.CodeType) -> set[tuple]:
    """Where a code object and those nested in it were written: file, line, name."""
    keys = {(code.co_filename, code.co_firstlineno, code.co_name)}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            keys |= _code_keys(const)
    return keys


def _carries(obj, keys: set, seen: set, depth: int) -> bool:
    """Whether an answer holds code written where the reference was: in itself, or in a
    function it reaches (the globals it names, its closure, defaults, a class's methods, a
    partial's function), `depth` steps deep."""

    from ..launcher.pickling import names_used

    if depth < 0 or id(obj) in seen or len(seen) > 5000:
        return False
    seen.add(id(obj))
    if isinstance(obj, types.CodeType):
        return bool(_code_keys(obj) & keys)
    parts: list = []
    # What the notebook defined (in __main__) is searched through; what a library defined
    # is only looked at, for code that is the reference's.
    ours = getattr(obj, "__module__", None) == "__main__"
    if isinstance(obj, types.FunctionType):
        code = obj.__code__
        parts = [code]
        if ours:
            parts += [*(obj.__defaults__ or ())]
            parts += [c.cell_contents for c in obj.__closure__ or () if _filled(c)]
            parts += [obj.__globals__[n] for n in names_used(code) if n in obj.__globals__]
    elif isinstance(obj, (types.MethodType, staticmethod, classmethod)):
        parts = [obj.__func__]
    elif isinstance(obj, functools.partial):
        parts = [obj.func, *obj.args, *obj.keywords.values()]
    elif isinstance(obj, property):
        parts = [obj.fget, obj.fset]
    elif isinstance(obj, type) and ours:
        parts = list(vars(obj).values())
    return any(_carries(part, keys, seen, depth - 1) for part in parts)


def _filled(cell) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True
