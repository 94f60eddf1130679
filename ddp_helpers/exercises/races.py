"""Races made certain: an async collective's result reaches the answer's tensors only when
the answer waits for it.

An answer that calls `dist.all_reduce(t, async_op=True)` and never waits usually passes
anyway: on the CPU the reduction often lands before the answer reads `t`. A check cannot
hope to catch it, so inside `waits_required()` such a call runs at once on a copy of its
output tensors, and the result is copied into them only when the work is waited for
(`work.wait()`, or its future taken with `get_future()`). An answer that never waits then
ends with its tensors as they were, on every run. A call without async_op, and every call's
order across the ranks, are unchanged.
"""

from __future__ import annotations

import contextlib
import inspect

# Each collective whose result lands in tensors it is given: which argument holds them.
_OUTPUTS = {
    "all_reduce": "tensor",
    "broadcast": "tensor",
    "reduce": "tensor",
    "all_gather": "tensor_list",
    "all_gather_into_tensor": "output_tensor",
    "all_gather_single": "output_tensor",
    "reduce_scatter_single": "output",
    "reduce_scatter_tensor": "output",
    "all_to_all_single": "output",
}


class _Deferred:
    """A collective's work, done on copies: its result lands in the outputs when waited."""

    def __init__(self, outputs, copies):
        self._pairs = list(zip(outputs, copies, strict=True))
        self._landed = False

    def _land(self) -> None:
        if not self._landed:
            self._landed = True
            for out, copy in self._pairs:
                out.copy_(copy)

    def wait(self, timeout=None) -> bool:
        self._land()
        return True

    def is_completed(self) -> bool:
        return self._landed

    def is_success(self) -> bool:
        return True

    def get_future(self):
        import torch

        self._land()
        future = torch.futures.Future()
        future.set_result([out for out, _ in self._pairs])
        return future


def _tensors(value) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]


@contextlib.contextmanager
def waits_required():
    """Inside: a collective called with async_op=True is done at once on copies, and lands
    in its output tensors only when its work is waited for. Yields the list of those works
    (`unwaited(works)` counts the ones never waited for)."""
    import torch.distributed as dist

    real = {name: getattr(dist, name) for name in _OUTPUTS if hasattr(dist, name)}
    works: list[_Deferred] = []

    def deferred(name, collective):
        signature = inspect.signature(collective)

        def call(*args, **kwargs):
            bound = signature.bind(*args, **kwargs)
            if not bound.arguments.get("async_op"):
                return collective(*args, **kwargs)
            outputs = _tensors(bound.arguments[_OUTPUTS[name]])
            copies = [t.clone() for t in outputs]
            given = copies if isinstance(bound.arguments[_OUTPUTS[name]], list) else copies[0]
            bound.arguments[_OUTPUTS[name]] = given
            bound.arguments["async_op"] = False
            collective(*bound.args, **bound.kwargs)
            works.append(_Deferred(outputs, copies))
            return works[-1]

        return call

    for name, collective in real.items():
        setattr(dist, name, deferred(name, collective))
    try:
        yield works
    finally:
        for name, collective in real.items():
            setattr(dist, name, collective)


def unwaited(works) -> int:
    """How many of the works waits_required() yielded were never waited for."""
    return sum(not work.is_completed() for work in works)
