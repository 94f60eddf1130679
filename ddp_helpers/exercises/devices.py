"""Checks that an answer makes the tensors it hands a collective on the data's device.

Here every check runs on the CPU, where a tensor made without `device=` (the default
device) is on the same device as the model: it works. Under nccl the model and the data
are on the rank's GPU, the default device is still the CPU, and nccl refuses a CPU tensor.
To see the difference on the CPU, a check runs the answer once more with the answer's own
default device moved to `meta`: what the answer's code makes without `device=` lands there,
while whatever it makes from the data (`device=t.device`, `t.clone()`, `zeros_like`), and
whatever torch makes for it (a DataLoader's seed, a sampler's permutation), stays on the CPU. A
collective handed a `meta` tensor records its own name and runs on zeros of the same shape
instead, so every rank still makes the same calls. (A device named outright, device="cpu",
is not told apart here from the model's own, which is the CPU too.) An answer may still
fail on one rank only (a meta tensor breaks much before any collective): every call of the
probe therefore goes through a group of its own whose collectives give up after
PROBE_TIMEOUT seconds, so that no rank is left waiting for one that gave up.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import sys
import types
import warnings

# The words in the name of everything torch.distributed offers that moves tensors (or
# objects) between ranks, or waits for them: the list is read from the torch at hand, so a
# collective a newer torch adds (2.13's all_gather_single, reduce_scatter_single) is in it.
_COLLECTIVE_WORDS = ("reduce", "gather", "scatter", "broadcast", "to_all", "send", "recv")
_COLLECTIVE_WORDS += ("barrier",)
PROBE_TIMEOUT = 5  # seconds; every probe call is a few small tensors


def collectives() -> tuple[str, ...]:
    """The public collectives of this torch.distributed (all_reduce, all_gather_single,
    barrier, send_object_list, ...), by name."""
    import torch.distributed as dist

    return tuple(
        name
        for name, value in vars(dist).items()
        if not name.startswith("_")
        and any(word in name for word in _COLLECTIVE_WORDS)
        and type(value) is types.FunctionType  # (type(): no deprecated object's __class__)
    )


def _on_cpu(value):
    """value with every meta tensor in it (or in a list of them) replaced by zeros on the CPU."""
    import torch

    if isinstance(value, torch.Tensor) and value.is_meta:
        return torch.zeros(value.shape, dtype=value.dtype, device="cpu")
    if isinstance(value, list):
        return [_on_cpu(v) for v in value]
    return value


def _answers_tensors_on_meta():
    """A torch function mode: a tensor made without device= by code outside torch and the
    course (the answer's) is made on `meta`; what torch's own code and the course's make,
    and a tensor made from a tensor (torch.tensor(t)), stay where they were."""
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._device import _device_constructors

    # torch's own code, and the course's (a check's spies and helpers), are not the answer.
    own = tuple(
        os.path.dirname(module.__file__) + os.sep
        for module in (torch, sys.modules[__name__.split(".")[0]])
    )
    constructors = _device_constructors()

    def from_a_tensor(args) -> bool:
        # torch.tensor(t), as_tensor(t), asarray(t): made where t is, the GPU under nccl.
        return any(
            isinstance(a, torch.Tensor)
            or (isinstance(a, (list, tuple)) and any(isinstance(x, torch.Tensor) for x in a))
            for a in args
        )

    class AnswersTensorsOnMeta(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if func in constructors and kwargs.get("device") is None and not from_a_tensor(args):
                caller = sys._getframe(1).f_code.co_filename
                if not caller.startswith(own):
                    kwargs["device"] = "meta"
            return func(*args, **kwargs)

    return AnswersTensorsOnMeta()


def _has_meta(value) -> bool:
    import torch

    if isinstance(value, torch.Tensor):
        return value.is_meta
    return isinstance(value, list) and any(_has_meta(v) for v in value)


@contextlib.contextmanager
def default_device_elsewhere():
    """Inside: tensors the answer makes without device= are on `meta`, and collectives
    called without a group use a group that gives up after PROBE_TIMEOUT seconds; the list
    yielded collects the collectives that got a meta tensor. Every rank must enter it: where
    one does not within PROBE_TIMEOUT (it still waits in a collective of the answer's that
    the others never called), it yields None and probes nothing, and the launch names the
    rank left waiting."""
    import datetime

    import torch.distributed as dist

    offended: list[str] = []
    try:
        probe = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=PROBE_TIMEOUT))
    except dist.DistStoreError:  # its rendezvous timed out: a rank never came
        yield None
        return
    real = {name: getattr(dist, name) for name in collectives()}

    def guarded(name, collective):
        signature = inspect.signature(collective)

        def call(*args, **kwargs):
            bound = signature.bind_partial(*args, **kwargs)
            given = bound.arguments
            if any(_has_meta(v) for v in given.values()):
                offended.append(name)
                given.update({k: _on_cpu(v) for k, v in given.items()})
            if given.get("group") is None and "group" in signature.parameters:
                given["group"] = probe
            return collective(*bound.args, **bound.kwargs)

        return call

    for name, collective in real.items():
        setattr(dist, name, guarded(name, collective))
    try:
        with _answers_tensors_on_meta():
            yield offended
    finally:
        for name, collective in real.items():
            setattr(dist, name, collective)
        dist.destroy_process_group(probe)


def made_off_device(fn, *args) -> str | None:
    """Run fn(*args) with the default device moved away from the data's: the first collective
    handed a tensor made without device=, or None. An answer that fails there for another
    reason is judged by its run on the CPU, not here; where the ranks are not all there to
    probe (default_device_elsewhere), None too."""
    with default_device_elsewhere() as offended, warnings.catch_warnings():
        if offended is None:
            return None
        warnings.simplefilter("ignore")  # the run on the CPU has shown them
        try:
            fn(*args)
        except Exception:  # noqa: BLE001 - a meta tensor breaks much; only collectives count
            pass
    return offended[0] if offended else None
