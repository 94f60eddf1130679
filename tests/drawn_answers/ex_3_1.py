"""Exercise 3.1's answers of issue 49: each returns what one call or one model allows, or is
right and written another way. DRAWN joins the sweep (tests/exercises/test_answers.py)."""

from __future__ import annotations

# ---------------------------------------------------------------- 3.1 wrap


def wrap_returning_the_module_inside(model, device):
    from torch.nn.parallel import DistributedDataParallel as DDP

    ddp = DDP(model.to(device), device_ids=[device.index] if device.type == "cuda" else None)
    return ddp.module  # "the same model, now in sync": the wrapper left behind


_wrapped: dict = {}


def wrap_once_per_process(model, device):
    from torch.nn.parallel import DistributedDataParallel as DDP

    if "ddp" not in _wrapped:  # wrapping twice would broadcast twice
        ids = [device.index] if device.type == "cuda" else None
        _wrapped["ddp"] = DDP(model.to(device), device_ids=ids)
    return _wrapped["ddp"]


def wrap_in_float32(model, device):
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = model.to(device, dtype=torch.float32)  # gradients all-reduced as float32
    return DDP(model, device_ids=[device.index] if device.type == "cuda" else None)


def wrap_with_keywords(model, device):
    import torch.nn as nn

    on_gpu = device.type == "cuda"
    return nn.parallel.DistributedDataParallel(
        module=model.to(device=device),
        device_ids=[device] if on_gpu else None,
        output_device=device if on_gpu else None,
    )


def wrap_by_the_index_alone(model, device):
    from torch.nn.parallel import DistributedDataParallel

    if device.index is None:  # the CPU: no GPU number, no device_ids
        return DistributedDataParallel(model.cpu())
    return DistributedDataParallel(model.cuda(device.index), device_ids=[device.index])


DRAWN = {
    "3.1": (
        [
            (wrap_returning_the_module_inside, "wrap_inner"),
            (wrap_once_per_process, "wrap_kept"),
            (wrap_in_float32, "wrap_dtype"),
        ],
        [wrap_with_keywords, wrap_by_the_index_alone],
    ),
}
