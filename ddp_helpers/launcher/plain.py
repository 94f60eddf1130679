"""Reading what a rank sends without running code of its making.

A pickle names functions to call as it loads (`__reduce__`): whoever writes one can run code
in the process that loads it. A rank runs whatever its caller gave it, and when that is a
learner's answer being graded, the process reading its messages (the checks' scorer) must
not be the learner's to command. So what comes from a rank is loaded here with the classes
it may name held to a short list (the standard library's way: pickle's "Restricting
Globals"):

- `load_message`: the launcher's own messages (protocol.py's dataclasses), everywhere;
- `load_plain`: a value as `launch_plain` (the checks) takes it back: numbers, strings,
  bytes, lists, tuples, dicts, sets, tensors (their storage read by torch.load with
  weights_only=True), torch's sizes, devices and dtypes, and Opaque. Anything else, a
  learner's own class among them, is refused with PlainOnly, before any of it runs.

A check's harness makes what it returns plain with `to_plain` in the rank: a learner's own
object comes back as an Opaque, its type's name and its repr as text.
"""

from __future__ import annotations

import collections
import functools
import io
import operator
import pickle
import signal
import sys
from dataclasses import is_dataclass
from itertools import islice

from ..i18n import messages
from ..torch_compat import Reason
from . import protocol

MESSAGES = messages(
    "launcher.plain",
    {
        "not_plain": (
            "rank {rank} returned a value the check does not accept: it holds {what}. A "
            "check takes back plain data only (numbers, strings, lists, dicts, tensors)."
        ),
        # What a rank's value held, as not_plain's {what} names it (else a class's name).
        "persistent": "a persistent reference",
        "unreadable": "unreadable data ({kind})",
    },
)


class PlainOnly(pickle.UnpicklingError):
    """A pickle that names a class or function outside the list it may name."""

    def __init__(self, what: str):
        super().__init__(what)
        self.what = what


@functools.cache
def _protocol_classes() -> dict[tuple[str, str], type]:
    found: dict[tuple[str, str], type] = {
        (protocol.__name__, name): cls
        for name, cls in vars(protocol).items()
        if isinstance(cls, type) and is_dataclass(cls) and cls.__module__ == protocol.__name__
    }
    found[("signal", "Signals")] = signal.Signals  # Signal.signal, as signal.SIGTERM is one

    found[(Reason.__module__, Reason.__name__)] = Reason  # Ready.compat: why a check failed
    return found


class _Restricted(pickle.Unpickler):
    """An unpickler that may name only the globals of `allowed`: (module, name) -> object."""

    def __init__(self, data: bytes, allowed: dict):
        super().__init__(io.BytesIO(data))
        self.allowed = allowed

    def find_class(self, module: str, name: str):
        found = self.allowed.get((module, name))
        if found is None:
            raise PlainOnly(f"{module}.{name}")
        return found

    def persistent_load(self, pid):
        raise PlainOnly(MESSAGES["persistent"])


def load_restricted(data: bytes, allowed: dict):
    """A pickle that may name only the globals of `allowed` ({} for none); PlainOnly
    otherwise."""
    return _Restricted(data, allowed).load()


def load_message(data: bytes):
    """One of the launcher's messages (or a plain value: a string, a list of them)."""
    return _Restricted(data, _protocol_classes()).load()


def _load_storage(data: bytes):
    """A tensor's storage, read by torch's own loader for untrusted files."""
    import torch

    return torch.load(io.BytesIO(data), weights_only=True)


class _PlainGlobals:
    """What `load_plain` may name: the standard library's few, Opaque, and torch's tensors,
    sizes, devices and dtypes. torch is imported only once a pickle names it: a value of
    numbers and strings (most checks' records) is read without it, so a scorer that never
    receives a tensor never pays for `import torch`."""

    def __init__(self):
        from . import pickling

        self.plain = {
            ("builtins", "complex"): complex,
            ("builtins", "set"): set,
            ("builtins", "frozenset"): frozenset,
            ("collections", "OrderedDict"): collections.OrderedDict,
            (pickling.__name__, "_rebuild_tensor"): pickling._rebuild_tensor,
            (__name__, "Opaque"): Opaque,
        }

    def get(self, key: tuple[str, str]):
        found = self.plain.get(key)
        if found is None and key[0].partition(".")[0] == "torch":
            found = _torch_globals().get(key)
        return found


@functools.cache
def _torch_globals() -> dict[tuple[str, str], object]:
    import torch
    import torch._utils

    found: dict[tuple[str, str], object] = {
        ("torch._utils", "_rebuild_tensor_v2"): torch._utils._rebuild_tensor_v2,
        ("torch.storage", "_load_from_bytes"): _load_storage,
        ("torch", "Size"): torch.Size,
        ("torch", "device"): torch.device,
    }
    for name in dir(torch):
        if isinstance(getattr(torch, name, None), torch.dtype):
            found[("torch", name)] = getattr(torch, name)
    return found


@functools.cache
def _plain_globals() -> _PlainGlobals:
    return _PlainGlobals()


def load_plain(data: bytes):
    """A rank's value as plain data (see the module's docstring); PlainOnly otherwise."""
    return _Restricted(data, _plain_globals()).load()


def is_tensor(value) -> bool:
    """Whether value is a torch tensor, without importing torch: one exists in this
    process only if something here imported torch (load_plain does, for a pickled one)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def not_plain_text(rank: int, what: str) -> str:
    """What the error says of a rank whose value was refused."""
    return MESSAGES["not_plain"].format(rank=rank, what=what)


class Opaque:
    """What a rank had that is not plain data, as its type's name and its repr (cut to
    SHOWN characters): how a check shows a learner's own object without loading it.
    Its repr is that text, so that a message shows it as it would the object."""

    __slots__ = ("type_name", "text")

    def __init__(self, type_name: str, text: str):
        self.type_name, self.text = _exact(type_name), _exact(text)

    def __reduce__(self):
        return (Opaque, (self.type_name, self.text))

    def __setstate__(self, state):  # a pickle made by hand: its fields made text all the same
        slots = state[1] if isinstance(state, tuple) else state
        self.__init__(slots.get("type_name", ""), slots.get("text", ""))

    def __repr__(self) -> str:
        return self.text

    def __eq__(self, other) -> bool:
        return isinstance(other, Opaque) and (self.type_name, self.text) == (
            other.type_name,
            other.text,
        )

    def __hash__(self) -> int:
        return hash((self.type_name, self.text))


SHOWN = 300  # characters of an Opaque's text
_DEPTH = 8  # levels of nesting to_plain follows
_ITEMS = 100_000  # items of a list or dict it takes


def _exact(text) -> str:
    """text as a str of the str type itself (str's own method, whatever a subclass
    overrides), cut to SHOWN characters."""
    text = str.__str__(text) if isinstance(text, str) else object.__repr__(text)
    return text if len(text) <= SHOWN else text[:SHOWN] + "..."


def shown(value) -> str:
    """repr(value) as a plain str of at most SHOWN characters, whatever its __repr__ does."""
    try:
        return _exact(repr(value))
    except Exception as exc:  # noqa: BLE001 - the object's own repr failed
        return f"<{type(value).__name__} object: its repr raised {type(exc).__name__}>"


def to_plain(value, depth: int = 0):
    """In a rank: value as data load_plain takes back. Numbers, strings, bytes and None as
    their own types; lists, tuples, ranges, dicts and sets item by item; tensors detached on
    the CPU; what has __index__ or __float__ (numpy's numbers, 0-d tensors aside) as an int
    or a float; anything else as an Opaque."""
    kind = type(value)
    if value is None or kind in (bool, int, float, complex, str, bytes):
        return value
    # A subclass of a plain type (whose __eq__ may say yes to everything) as the type itself,
    # by the type's own methods.
    for base, exact in ((int, int.__index__), (float, float.__float__), (str, str.__str__)):
        if isinstance(value, base):
            return exact(value)
    if isinstance(value, bytes):
        return b"".join([value])
    torch = _torch()
    if torch is not None and isinstance(value, torch.Tensor):
        return value.detach().as_subclass(torch.Tensor).cpu()
    if depth >= _DEPTH:
        return Opaque(kind.__qualname__, shown(value))
    if isinstance(value, (list, tuple, range, set, frozenset)):
        items = [to_plain(item, depth + 1) for item in islice(value, _ITEMS)]
        if isinstance(value, (set, frozenset)):
            return set(items)
        return tuple(items) if isinstance(value, tuple) else items
    if isinstance(value, dict):
        return {
            to_plain(k, depth + 1): to_plain(v, depth + 1) for k, v in islice(value.items(), _ITEMS)
        }
    for convert in (_index, float):
        try:
            converted = convert(value)
        except Exception:  # noqa: BLE001 - not a number of that kind
            continue
        if type(converted) in (int, float):
            return converted
    return Opaque(kind.__qualname__, shown(value))


def _index(value) -> int:
    return operator.index(value)


def _torch():
    return sys.modules.get("torch")
