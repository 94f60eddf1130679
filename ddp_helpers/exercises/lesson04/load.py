"""4.6 load_checkpoint (Going further): onto this rank's own device, everything restored."""

from __future__ import annotations

import functools
import os
import sys

from ...i18n import messages
from ...torch_compat import Reason, Touchpoint, check, warnings
from .._core import (
    Exercise,
    Mistake,
    Phrase,
    Wrong,
    process_group,
    rank_folders,
    run_on_ranks,
)
from .save import _make_net, _trained_ddp, save_checkpoint

MESSAGES = messages(
    "exercises.lesson04.load",
    {
        "hint.load_map_location": (
            "torch.load puts every tensor back on the device it was saved from (cuda:0, "
            "when rank 0 saved from its GPU), unless map_location says where."
        ),
        "hint.load_restore": (
            "Load the weights into the plain model inside DDP, with strict=True, and the "
            "optimizer's state too; then return the epoch to start from."
        ),
        "hint.load_code": (
            "checkpoint = torch.load(path, map_location=next(model.parameters()).device); "
            "model.module.load_state_dict(checkpoint['model']); "
            "optimizer.load_state_dict(checkpoint['optimizer']); return "
            "checkpoint['epoch'] + 1."
        ),
        "load_map": (
            "The checkpoint was saved from a GPU this rank does not have; torch.load put the "
            "tensors back there and failed on rank {rank}: {error}"
        ),
        "load_map.title": "torch.load without map_location",
        # The touchpoint 4.6's check relies on (LoadDeviceText): what it is, what is lost.
        "load_device_text.what": (
            "torch.load's error text for a device this machine lacks ('deserialize object on')"
        ),
        "load_device_text.lost": (
            "the load check shows torch's own error, not its hint, for a checkpoint loaded "
            "without map_location"
        ),
        "load_weights": "After loading, the weights on rank {rank} differ from the checkpoint's.",
        "load_weights.title": "the weights not restored",
        "load_optimizer": (
            "After loading, the optimizer state on rank {rank} is not the saved one."
        ),
        "load_optimizer.title": "the optimizer state not restored",
        "load_epoch": (
            "It returned {got!r}; the checkpoint is of epoch {saved}, so resume at {want}."
        ),
        "load_epoch.title": "not the epoch to resume at",
        "load_ok": (
            "Loaded onto each rank's own device (the GPU it was saved from is not needed); "
            "weights, optimizer and epoch restored."
        ),
    },
)


def load_checkpoint(model, optimizer, path):
    import torch

    device = next(model.parameters()).device
    checkpoint = torch.load(path, map_location=device)  # onto this rank's own device
    model.module.load_state_dict(checkpoint["model"], strict=True)
    optimizer.load_state_dict(checkpoint["optimizer"])
    return checkpoint["epoch"] + 1


class LoadDeviceText(Touchpoint):
    """4.6's check tells a checkpoint loaded without map_location (its tensors saved on a
    GPU this machine lacks) from the answer's other errors by torch.load's text: "Attempting
    to deserialize object on a CUDA device but ...". Without it the check shows torch's own
    error, not its hint."""

    name = "load_device_text"
    texts = MESSAGES
    MISSING_DEVICE = "deserialize object on"

    def matches(self, exc: BaseException) -> bool:
        """True for torch.load's error on a tensor saved on a device this machine lacks."""
        return isinstance(exc, RuntimeError) and self.MISSING_DEVICE in str(exc)

    def check(self) -> Reason | None:
        """Load a saved tensor onto cuda:99 with torch told there is no CUDA, then no such GPU.

        Those are the two errors a checkpoint saved on a GPU gets where that GPU is missing
        (a machine without CUDA, or with fewer GPUs). torch is told, not asked: asking the
        CUDA driver here would keep every rank forked from this process from using CUDA.
        """
        import io

        import torch

        saved = io.BytesIO()
        torch.save(torch.zeros(1), saved)
        cuda = torch.cuda
        real = cuda.is_available, cuda.device_count
        try:
            for available in (False, True):
                cuda.is_available, cuda.device_count = (lambda a=available: a), (lambda: 0)
                saved.seek(0)
                try:
                    torch.load(saved, map_location="cuda:99")
                except Exception as exc:  # noqa: BLE001 - whatever it raises is what is checked
                    if not self.matches(exc):
                        return Reason.of("other_text", said=f"{type(exc).__name__}: {exc}")
                else:
                    return Reason.of("no_error")
        finally:
            cuda.is_available, cuda.device_count = real
        return None

    @functools.cache  # noqa: B019 - one object, checked once per process
    def warn_once(self) -> None:
        """Say, once, before 4.6's first check, if torch's text is not what it relies on."""
        for line in warnings(check([self]), [self]):
            print(line, file=sys.stderr, flush=True)


LOAD_DEVICE_TEXT = LoadDeviceText()


def _saved_from_a_missing_gpu():
    """From here on, torch.save records every tensor as saved from cuda:99.

    So a checkpoint loads only with a map_location, as one saved on a GPU machine would on
    a machine without that GPU (a public torch API: torch.serialization.register_package).
    """
    from torch.serialization import register_package

    register_package(1, lambda obj: "cuda:99", lambda obj, location: None)


def _load_harness(load_checkpoint, folder, epoch):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    with process_group():
        model, opt = _trained_ddp()
        path = os.path.join(folder, "ckpt.pt")
        if dist.get_rank() == 0:
            _saved_from_a_missing_gpu()
        save_checkpoint(model, opt, epoch, path)  # the reference save: rank 0 writes, all wait
        saved = {k: v.clone() for k, v in model.module.state_dict().items()}
        momentum = [opt.state[p]["momentum_buffer"].clone() for p in model.parameters()]
        # A fresh model and optimizer, as after a restart.
        fresh = DDP(_make_net(seed=123))
        fresh_opt = torch.optim.SGD(fresh.parameters(), lr=0.1, momentum=0.9)
        try:
            resume = load_checkpoint(fresh, fresh_opt, path)
        except Exception as exc:
            if not LOAD_DEVICE_TEXT.matches(exc):
                raise
            return {"map_error": str(exc).split(". ")[0] + "."}
        same_weights = all(torch.equal(saved[k], v) for k, v in fresh.module.state_dict().items())
        same_opt = all(
            p in fresh_opt.state and torch.equal(fresh_opt.state[p]["momentum_buffer"], m)
            for p, m in zip(fresh.parameters(), momentum, strict=True)
        )
        return {"weights": same_weights, "opt": same_opt, "resume": resume}


def _as_int(value):
    """value as an int if it is one (int, numpy or tensor integer); else None.

    5.9 or "5" is not an epoch `range()` takes; an object equal to everything is not one.
    """
    import operator

    try:
        return operator.index(value)
    except TypeError:
        return None


def _check_load(fn) -> Phrase:
    LOAD_DEVICE_TEXT.warn_once()
    for saved in (4, 0):  # two checkpoints: a resume hard-coded to 5 is caught
        with rank_folders(2, "ddp-ckpt-check-") as folder:
            results = run_on_ranks(_load_harness, fn, folder, saved, nprocs=2)
        for rank, r in enumerate(results):
            if "map_error" in r:
                raise Wrong("load_map", rank=rank, error=r["map_error"])
            if not r["weights"]:
                raise Wrong("load_weights", rank=rank)
            if not r["opt"]:
                raise Wrong("load_optimizer", rank=rank)
            if _as_int(r["resume"]) != saved + 1:
                raise Wrong("load_epoch", got=r["resume"], saved=saved, want=saved + 1)
    return Phrase("load_ok")


q6 = Exercise(
    "4.6",
    "load_checkpoint",
    _check_load,
    load_checkpoint,
    texts=MESSAGES,
    hints=("load_map_location", "load_restore", "load_code"),
    mistakes={
        "load_map": Mistake(hint="load_map_location"),
        "load_weights": Mistake(hint="load_restore"),
        "load_optimizer": Mistake(hint="load_restore"),
        "load_epoch": Mistake(hint="load_restore"),
        "hang": Mistake(hint="load_restore"),
        "mismatch": Mistake(hint="load_restore"),
    },
    further=True,
)
