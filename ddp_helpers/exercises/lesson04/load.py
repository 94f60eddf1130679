"""4.6 load_checkpoint (Going further): onto this rank's own device, everything restored."""

from __future__ import annotations

import functools
import io
import operator
import os
import random
import sys

from ...i18n import messages
from ...torch_compat import Reason, Touchpoint, check, warnings
from ..kit import (
    Exercise,
    Mistake,
    Phrase,
    Wrong,
    and_list,
    process_group,
    rank_folders,
    rank_mistakes,
    run_on_ranks,
)
from ..space import CHECK_SEED, Space, on_hidden_seeds, trying
from .save import _make_net, _train_step, _trained_ddp, save_checkpoint

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
        "load_weights": (
            "After loading, rank {rank}'s parameters differ from the checkpoint's by up to "
            "{diff:.2e}."
        ),
        "load_buffers": (
            "After loading, rank {rank}'s parameters are the checkpoint's but its buffers are "
            "not ({names}): model.module.load_state_dict(checkpoint['model']) restores both; "
            "the parameters alone leave the buffers (BatchNorm's running statistics) as they "
            "were."
        ),
        "load_buffers.title": "the parameters restored, not the buffers",
        "tried_weights": "a model in {v}",
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
            "Loaded onto each rank's own device (the GPU it was saved from is not needed), on "
            "2 and 3 ranks, twice in one process from checkpoints of other epochs: "
            "parameters, buffers, optimizer and epoch restored, in float32 and float64."
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


def _load_harness(load_checkpoint, folder, epochs, dtype):
    """On each rank: for each epoch of `epochs` (a training step between), the reference
    saves a checkpoint recorded as saved from a GPU this machine lacks, and the answer loads
    it into a fresh model and optimizer, in one process; what it restored, per call."""
    import torch.distributed as dist

    with process_group():
        model, opt = _trained_ddp(dtype)
        if dist.get_rank() == 0:
            _saved_from_a_missing_gpu()
        records = []
        for call, epoch in enumerate(epochs):
            if call:
                _train_step(model, opt)
            path = os.path.join(folder, f"ckpt-{call}.pt")
            save_checkpoint(model, opt, epoch, path)  # the reference: rank 0 writes, all wait
            records.append(_loaded(load_checkpoint, model, opt, path, seed=123 + call))
            if "map_error" in records[-1]:
                break
        return records


def _loaded(load_checkpoint, model, opt, path: str, seed: int) -> dict:
    """The answer's load into a fresh model and optimizer (as after a restart), against
    the model and optimizer the checkpoint was saved from."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    fresh = DDP(_make_net(seed=seed, dtype=dtype))
    fresh_opt = torch.optim.SGD(fresh.parameters(), lr=0.1, momentum=0.9)
    try:
        resume = load_checkpoint(fresh, fresh_opt, path)
    except Exception as exc:
        if not LOAD_DEVICE_TEXT.matches(exc):
            raise
        return {"map_error": str(exc).split(". ")[0] + "."}
    saved, got = model.module.state_dict(), fresh.module.state_dict()
    params = [name for name, _ in model.module.named_parameters()]
    apart = [(saved[k].double() - got[k].double()).abs().max().item() for k in params]
    buffers = [k for k in saved if k not in params and not torch.equal(saved[k], got[k])]
    same_opt = all(
        p in fresh_opt.state and torch.equal(fresh_opt.state[p]["momentum_buffer"], m)
        for p, m in zip(fresh.parameters(), _momentum(model, opt), strict=True)
        if m is not None
    )
    return {"apart": max(apart), "buffers": buffers, "opt": same_opt, "resume": resume}


def _momentum(model, opt) -> list:
    """Each parameter's momentum buffer in `opt` (None for a frozen one: it has none)."""
    return [opt.state[p]["momentum_buffer"] if p in opt.state else None for p in model.parameters()]


def _as_int(value):
    """value as an int if it is one (int, numpy or tensor integer); else None.

    5.9 or "5" is not an epoch `range()` takes; an object equal to everything is not one.
    """
    try:
        return operator.index(value)
    except TypeError:
        return None


# (ranks, machines): 2 ranks and 3; each run loads twice in one process, two checkpoints
# saved at epochs drawn for the seed (_draws), from a model in float32 or float64.
LOAD_RUNS = ((2, 1), (3, 1))
NOTEBOOK_EPOCH = 1  # the epoch the notebook's resume demo saves last (run(2) stops after it)
EPOCHS = (0, 2, 4, 5, 8, 11)
SPACE = Space(
    drawn={
        "world": (2, 3),
        "calls": (2,),
        "counts": {"epoch": EPOCHS},
        "dtypes": ("float32", "float64"),
        "model": ("frozen", "buffer"),
        "device": ("a checkpoint saved from cuda:99, a GPU this machine lacks",),
    },
    why_not={
        "machines": "every rank loads the one file onto its own device: on the CPU no "
        "machine's part shows (the device is drawn: a file saved from a GPU this machine "
        "lacks, which map_location must handle)",
        "steps": "load_checkpoint runs no loop: it is called twice in one process, a "
        "training step and a save between (calls)",
        "lengths": "a checkpoint is the model's and the optimizer's state: no lengths of the "
        "answer's own",
    },
    notebook={"epoch": NOTEBOOK_EPOCH},
)


def _draws(seed: int) -> list[tuple[int, int, tuple[int, int], str]]:
    """(ranks, machines, the two checkpoints' epochs, dtype) of each run for this seed."""
    dtypes = SPACE.values("dtypes")
    draw = random.Random(f"4.6/{seed}")
    return [
        (ranks, machines, tuple(draw.sample(EPOCHS, 2)), dtypes[(i + seed) % len(dtypes)])
        for i, (ranks, machines) in enumerate(LOAD_RUNS)
    ]


def _check_load(fn, seed: int = CHECK_SEED) -> Phrase:
    LOAD_DEVICE_TEXT.warn_once()
    for ranks, machines, epochs, dtype in _draws(seed):
        with trying(ranks=ranks, machines=machines, weights=dtype):
            with rank_folders(ranks, "ddp-ckpt-check-") as folder:
                runs = run_on_ranks(
                    _load_harness, fn, folder, epochs, dtype, nprocs=ranks, nnodes=machines
                )
            for call, saved in enumerate(epochs):
                with trying(call=call + 1):
                    for rank, run in enumerate(runs):
                        _judge_load(run[call], rank, saved)
    return Phrase("load_ok")


def _judge_load(r: dict, rank: int, saved: int) -> None:
    """One rank's load of one checkpoint: the Wrong that names what is off, if anything."""
    if "map_error" in r:
        raise Wrong("load_map", rank=rank, error=r["map_error"])
    if not r["apart"] == 0.0:  # nan included
        raise Wrong("load_weights", rank=rank, diff=r["apart"])
    if r["buffers"]:
        raise Wrong("load_buffers", rank=rank, names=and_list(r["buffers"]))
    if not r["opt"]:
        raise Wrong("load_optimizer", rank=rank)
    if _as_int(r["resume"]) != saved + 1:
        raise Wrong("load_epoch", got=r["resume"], saved=saved, want=saved + 1)


exercise = Exercise(
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
        "load_buffers": Mistake(hint="load_restore"),
        "load_epoch": Mistake(hint="load_restore"),
        **rank_mistakes(hint="load_restore"),
    },
    hidden=on_hidden_seeds(_check_load),
    space=SPACE,
    further=True,
)
