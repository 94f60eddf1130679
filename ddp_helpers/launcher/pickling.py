"""cloudpickle, with two changes the launcher needs."""

from __future__ import annotations

import io
import marshal
import pickle
import sys
import types

import cloudpickle


def names_used(code: types.CodeType) -> set[str]:
    """The global and attribute names a code object and those nested in it use (what a
    %%ddp cell ships; where the checks look for the course's reference in an answer)."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= names_used(const)
    return names


def _load_code(data: bytes) -> types.CodeType:
    return marshal.loads(data)


def _rebuild_tensor(tensor):
    return tensor


class _Pickler(cloudpickle.CloudPickler):
    cpu_tensors = False

    def reducer_override(self, obj):
        if isinstance(obj, types.CodeType):
            # cloudpickle renames every code object's file to "<dynamic-code>"; keeping the
            # real name (a notebook cell's) lets tracebacks in the ranks show source lines.
            # Kernel and ranks run the same interpreter, so marshal's format matches.
            return _load_code, (marshal.dumps(obj),)
        if self.cpu_tensors:
            torch = sys.modules.get("torch")
            if torch is not None and isinstance(obj, torch.Tensor):
                if obj.device.type != "cpu" or obj.requires_grad or type(obj) is not torch.Tensor:
                    return _rebuild_tensor, (obj.detach().cpu().clone(),)
        return super().reducer_override(obj)


def dumps(obj, *, cpu_tensors: bool = False) -> bytes:
    """Pickle by value what is defined in the notebook; with cpu_tensors, tensors on CPU."""
    buf = io.BytesIO()
    pickler = _Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.cpu_tensors = cpu_tensors
    pickler.dump(obj)
    return buf.getvalue()
