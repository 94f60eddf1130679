"""What the capstone's ranks watch while the learner's train_ddp runs (exercise 4.1).

Spies on the classes and functions the recipe uses, whatever names the answer imported them
under: DDP's construction (and, on the model it wraps, each training batch: a forward whose
output a backward went through), DistributedSampler's passes (the order each gave) and its
set_epoch calls, and torch.save and torch.load of the checkpoint's folder (which rank, at
which point of the job). That point is the default group's sequence number, the collectives
the rank has entered: a save on rank 0 and a load on another rank with the same number had
no collective between them, so nothing made the load wait for the save.
"""

from __future__ import annotations

import contextlib
import os
import time

RELOAD_WAIT = 10.0  # s: how long a load that failed before rank 0 wrote the file retries


def new_record() -> dict:
    """What a rank's spies write down, as plain data (the samplers held apart)."""
    return {
        "wrapped": 0,
        "batches": [],  # (the pass it was taken in, its rows) of each training batch
        "passes": [],  # each pass of a DistributedSampler: the order it gave
        "set_epoch": [],  # (the epoch told, the passes begun before it, the sampler told)
        "iterated": [],  # the samplers whose passes these are, by id
        "early": [],  # the weights before the first training step, and after it
        "saves": [],  # {"seq", "passes"} of each torch.save into the checkpoint's folder
        "loads": [],  # {"seq"} of each torch.load from it
        "seq_left": None,  # the sequence number when the answer destroyed the group
    }


def install(record: dict, folder: str) -> None:
    """Watch, in this rank, everything the judge of 4.1 reads from `record`."""
    kept: list = []  # the samplers seen: alive until the rank ends, so no id is reused
    _watch_ddp(record)
    _watch_sampler(record, kept)
    _watch_files(record, folder)
    _watch_destroy(record)


def weights(model) -> dict:
    """A model's state dict, detached, on the CPU."""
    return {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}


def _watch_ddp(record: dict) -> None:
    """Count DDP's wraps; on the model wrapped, record each training batch and the first
    step's weights (on the inner model: a forward past DDP is seen too; by global hooks,
    which a model saved whole does not carry)."""
    import torch
    from torch.nn.modules.module import (
        register_module_forward_hook,
        register_module_forward_pre_hook,
    )
    from torch.nn.parallel import DistributedDataParallel

    real_init = DistributedDataParallel.__init__
    wrapped: list = []

    def init(self, module, *args, **kwargs):
        real_init(self, module, *args, **kwargs)
        record["wrapped"] += 1
        wrapped.append(module)

    def before(module, inputs):
        if module in wrapped and len(record["early"]) < 2 and torch.is_grad_enabled():
            record["early"].append(weights(module))  # before the first step, and after

    def after(module, inputs, output):
        # A training batch is one a backward goes through: an evaluation's forward (under
        # no_grad, or a loss only logged) is none.
        if module not in wrapped or not isinstance(output, torch.Tensor):
            return
        first = inputs[0] if inputs else None
        rows = len(first) if hasattr(first, "__len__") else None
        if output.requires_grad:
            taken_in = len(record["passes"]) - 1
            output.register_hook(lambda grad: record["batches"].append((taken_in, rows)))

    DistributedDataParallel.__init__ = init
    register_module_forward_pre_hook(before)
    register_module_forward_hook(after)


def _watch_sampler(record: dict, kept: list) -> None:
    from torch.utils.data.distributed import DistributedSampler

    real_iter = DistributedSampler.__iter__
    real_set_epoch = DistributedSampler.set_epoch

    def iterate(self):
        order = list(real_iter(self))
        kept.append(self)
        record["passes"].append(order)
        record["iterated"].append(id(self))
        return iter(order)

    def set_epoch(self, epoch):
        kept.append(self)
        record["set_epoch"].append((epoch, len(record["passes"]), id(self)))
        real_set_epoch(self, epoch)

    DistributedSampler.__iter__ = iterate
    DistributedSampler.set_epoch = set_epoch


def sequence(record: dict) -> int | None:
    """The collectives this rank has entered in the default group (None if unknown)."""
    import torch.distributed as dist

    if not dist.is_initialized():
        return record["seq_left"]
    try:
        return dist.distributed_c10d._get_default_group()._get_sequence_number_for_group()
    except (AttributeError, RuntimeError):
        return None


def _watch_destroy(record: dict) -> None:
    """A load after the answer's cleanup(): at the sequence number the group ended with."""
    import torch.distributed as dist

    real = dist.destroy_process_group

    def destroy(group=None):
        if group is None:
            record["seq_left"] = sequence(record)
        return real(group)

    dist.destroy_process_group = destroy


def _inside(target, folder: str) -> bool:
    """Whether a file torch.save or torch.load is given (a path or a file) is in `folder`."""
    name = target if isinstance(target, (str, os.PathLike)) else getattr(target, "name", None)
    if not isinstance(name, (str, os.PathLike)):
        return False
    return os.path.dirname(os.path.abspath(os.fspath(name))) == os.path.abspath(folder)


def _watch_files(record: dict, folder: str) -> None:
    """Every torch.save into the checkpoint's folder (a temporary file there, then
    os.replace, counts) and every torch.load from it, as serialization's own openers see
    them; a load that fails on a rank other than 0 is tried again (_retried)."""
    import torch
    import torch.serialization as serialization

    real_writer = serialization._open_zipfile_writer
    real_opener = serialization._open_file_like

    def saved(target) -> None:
        if _inside(target, folder):
            record["saves"].append({"seq": sequence(record), "passes": len(record["passes"])})

    @contextlib.contextmanager
    def writer(target):
        with real_writer(target) as opened:
            yield opened
        saved(target)  # written whole: the zip closed

    @contextlib.contextmanager
    def opener(target, mode):
        if "r" in mode and _inside(target, folder):
            record["loads"].append({"seq": sequence(record)})
        with real_opener(target, mode) as opened:
            yield opened
        if "w" in mode:
            saved(target)

    serialization._open_zipfile_writer = writer
    serialization._open_file_like = opener
    torch.load = serialization.load = _retried(serialization.load, folder)


def _retried(load, folder: str):
    """torch.load that, on a rank other than 0, tries a failed load of the checkpoint again
    until rank 0 has written it: a load with no barrier after the save is then named by the
    judge (from the sequence numbers) on every run, not seen as a crash on some."""

    def retried(f, *args, **kwargs):
        if os.environ.get("RANK") == "0" or not _inside(f, folder):
            return load(f, *args, **kwargs)
        deadline = time.monotonic() + RELOAD_WAIT
        while True:
            try:
                return load(f, *args, **kwargs)
            except Exception:  # not there yet, or half written: rank 0 is at it
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)

    return retried
