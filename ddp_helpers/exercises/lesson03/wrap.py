"""3.1 wrap: the model on this rank's device, wrapped in DDP (the GPU index of each rank)."""

from __future__ import annotations

import os

from ...i18n import messages
from .._core import (
    Exercise,
    Mistake,
    Phrase,
    Wrong,
    process_group,
    run_on_ranks,
)

MESSAGES = messages(
    "exercises.lesson03.wrap",
    {
        "hint.wrap_move_first": (
            "DDP wraps the model where it already is; it does not move it. Put the model on "
            "this rank's device first, then wrap it, and return the wrapper."
        ),
        "hint.wrap_device_ids": (
            "device_ids names the one GPU a model lives on, by its number on this machine: "
            "the number of the device you were given. For a model on the CPU, DDP refuses "
            "any device_ids."
        ),
        "hint.wrap_code": (
            'return DDP(model.to(device), device_ids=[device.index] if device.type == "cuda" '
            "else None)"
        ),
        "wrap_bare": (
            "wrap returned a {kind}, not a DistributedDataParallel: nothing copied rank 0's "
            "weights to the other ranks (rank 1 kept its own), and nothing would average the "
            "gradients in backward()."
        ),
        "wrap_bare.title": "not wrapped in DistributedDataParallel",
        "wrap_cpu_ids": (
            "On the CPU, DDP refused the device_ids it was given ({error}). device_ids is "
            "for a model on one GPU; a model on the CPU is wrapped without it. (The check's "
            "machine has a GPU, too few for both ranks: the set-up chose the CPU, so go by "
            "the device wrap is given, not by whether CUDA exists.)"
        ),
        "wrap_cpu_ids.title": "device_ids for a model on the CPU",
        "wrap_weights": (
            "After wrap, rank {rank}'s weights were not rank 0's: DDP was told not to "
            "broadcast them at construction, so the ranks start from different models."
        ),
        "wrap_weights.title": "the weights were not broadcast from rank 0",
        "wrap_buffers": (
            "After wrap, rank {rank}'s buffers (BatchNorm's running statistics) were not "
            "rank 0's: DDP was told not to broadcast buffers, so they start different and "
            "stay so."
        ),
        "wrap_buffers.title": "buffers not broadcast (broadcast_buffers=False)",
        "wrap_not_moved": (
            "On 2 pretend machines with 2 GPUs each, rank {rank} (local rank {local} on "
            "machine {node}) was given {device}, but its model was {where} when DDP wrapped "
            "it. DDP does not move a model: the model must already be on the device it was "
            "given."
        ),
        "wrap_not_moved.title": "the model not moved to its device before wrapping",
        "wrap_still_cpu": "still on the CPU",
        "wrap_on": "on {device}",
        "wrap_no_ids": (
            "On a pretend GPU machine, rank {rank}'s model on {device} was wrapped without "
            "device_ids. DDP accepts that but then leaves each batch where it is; the "
            "course's rule names the model's one GPU in device_ids, and DDP moves each batch "
            "there before forward."
        ),
        "wrap_no_ids.title": "a GPU model wrapped without device_ids",
        "wrap_global_ids": (
            "Rank {rank} is local rank {local} on machine {node}, which has GPUs cuda:0 and "
            "cuda:1; it was given {device} but wrapped with device_ids={ids}. device_ids "
            "counts GPUs on this machine, not ranks across machines."
        ),
        "wrap_global_ids.title": "RANK used where LOCAL_RANK belongs",
        "wrap_other_ids": (
            "Rank {rank} (local rank {local} on machine {node}) was given {device} but "
            "wrapped with device_ids={ids}: one GPU, the one its model is on."
        ),
        "wrap_other_ids.title": "device_ids not the model's GPU",
        "wrap_gpu_error": (
            "On a pretend GPU machine (only DDP's constructor and the model's move are "
            "pretended), wrap raised {error} on rank {rank}."
        ),
        "wrap_gpu_error.title": "an error on a GPU machine",
        "wrap_ok": (
            "On 2 CPU ranks whose models started different, every rank held rank 0's weights "
            "and buffers after wrap, without device_ids; on 2 pretend machines x 2 GPUs, "
            "each rank's model went to its cuda:LOCAL_RANK and DDP got "
            "device_ids=[LOCAL_RANK]."
        ),
    },
)


def wrap(model, device):
    from torch.nn.parallel import DistributedDataParallel as DDP

    return DDP(model.to(device), device_ids=[device.index] if device.type == "cuda" else None)


def _sync_model():
    import torch

    return torch.nn.Sequential(
        torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3), torch.nn.Tanh(), torch.nn.Linear(3, 2)
    )


def _rank_model(rank):
    """The model rank `rank` builds: its own seed, and its own running mean (a buffer)."""
    import torch

    torch.manual_seed(rank)
    model = _sync_model()
    with torch.no_grad():
        model[1].running_mean.fill_(rank + 1.0)
    return model


def _wrap_harness(wrap):
    """On 2 CPU ranks with different models: what wrap returned, and the weights it holds."""
    from unittest import mock

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    with process_group():
        # A machine with one GPU for two ranks: set-up chose the CPU, yet CUDA is there. An
        # answer must go by the device it is given, not by whether CUDA exists.
        try:
            with (
                mock.patch("torch.cuda.is_available", return_value=True),
                mock.patch("torch.cuda.device_count", return_value=1),
            ):
                wrapped = wrap(_rank_model(dist.get_rank()), torch.device("cpu"))
        except ValueError as exc:  # DDP refusing device_ids for a CPU model is the mistake
            if "device_ids" not in str(exc):
                raise
            return {"error": f"ValueError: {exc}"}
        inner = wrapped.module if isinstance(wrapped, DDP) else wrapped
        state = {k: v.detach().cpu().clone() for k, v in inner.state_dict().items()}
        return {"ddp": isinstance(wrapped, DDP), "kind": type(wrapped).__name__, "state": state}


def _gpu_index(device, local):
    """The GPU number DDP would make of a device or device id (None, "cuda": the current
    GPU, which the set-up made cuda:LOCAL_RANK); a device that is no GPU as its name."""
    import torch

    if device is None:
        return local
    if isinstance(device, int):
        return device
    device = torch.device(device)
    if device.type != "cuda":
        return "the CPU" if device.type == "cpu" else str(device)
    return local if device.index is None else device.index


def _place(device, local) -> str:
    index = _gpu_index(device, local)
    return f"cuda:{index}" if isinstance(index, int) else index


def _pretend_gpu_harness(wrap):
    """In a rank of pretend machines with a GPU per rank: where the model went, how DDP
    was built. Only DDP's constructor and the model's move are pretended."""
    from unittest import mock

    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    local = int(os.environ["LOCAL_RANK"])
    seen = {"moved_to": [], "wrapped": []}

    class PretendGpuModel(torch.nn.Linear):
        # Records where it is sent and stays where it is: this machine has no GPU.
        def to(self, *args, **kwargs):
            device = torch._C._nn._parse_to(*args, **kwargs)[0]
            if device is not None:
                seen["moved_to"].append(_place(device, local))
            return self

        def cuda(self, device=None):
            seen["moved_to"].append(_place(device, local))
            return self

    def pretend_ddp(self, module, device_ids=None, output_device=None, *args, **kwargs):
        torch.nn.Module.__init__(self)
        self.module = module
        ids = [_gpu_index(d, local) for d in device_ids] if device_ids else None
        where = seen["moved_to"][-1] if seen["moved_to"] else "never moved"
        seen["wrapped"].append({"where": where, "device_ids": ids})

    with (
        mock.patch.object(DDP, "__init__", pretend_ddp),
        mock.patch("torch.cuda.is_available", return_value=True),
        mock.patch("torch.cuda.device_count", return_value=int(os.environ["LOCAL_WORLD_SIZE"])),
        mock.patch("torch.cuda.current_device", return_value=local),
        mock.patch("torch.cuda.set_device"),
    ):
        try:
            wrapped = wrap(PretendGpuModel(4, 2), torch.device("cuda", local))
            error = None
        except Exception as exc:  # noqa: BLE001 - reported with the rank it happened on
            wrapped, error = None, f"{type(exc).__name__}: {exc}"
    env = {k: int(os.environ[k]) for k in ("RANK", "LOCAL_RANK", "GROUP_RANK")}
    kind = type(wrapped).__name__
    return {**env, **seen, "ddp": isinstance(wrapped, DDP), "kind": kind, "error": error}


def _check_wrap(fn) -> Phrase:
    results = run_on_ranks(_wrap_harness, fn, nprocs=2)
    expected = _rank_model(0).state_dict()
    buffers = {name for name, _ in _sync_model().named_buffers()}
    for rank, got in enumerate(results):
        if "error" in got:
            raise Wrong("wrap_cpu_ids", error=got["error"])
        if not got["ddp"]:
            raise Wrong("wrap_bare", kind=got["kind"])
        for name, want in expected.items():
            if not got["state"][name].equal(want):
                raise Wrong("wrap_buffers" if name in buffers else "wrap_weights", rank=rank)
    for got in run_on_ranks(_pretend_gpu_harness, fn, nprocs=4, nnodes=2):
        _check_pretend_gpu_rank(got)
    return Phrase("wrap_ok")


def _check_pretend_gpu_rank(got) -> None:
    rank, local, node = got["RANK"], got["LOCAL_RANK"], got["GROUP_RANK"]
    where = dict(rank=rank, local=local, node=node, device=f"cuda:{local}")
    if got["wrapped"]:
        wrapped = got["wrapped"][-1]
        if wrapped["where"] != f"cuda:{local}":
            place = (
                Phrase("wrap_still_cpu")
                if wrapped["where"] == "never moved"
                else Phrase("wrap_on", device=wrapped["where"])
            )
            raise Wrong("wrap_not_moved", where=place, **where)
        ids = wrapped["device_ids"]
        if ids is None:
            raise Wrong("wrap_no_ids", **where)
        if ids == [rank] and rank != local:
            raise Wrong("wrap_global_ids", ids=ids, **where)
        if ids != [local]:
            raise Wrong("wrap_other_ids", ids=ids, **where)
    if got["error"] is not None:
        raise Wrong("wrap_gpu_error", error=got["error"], rank=rank)
    if not got["ddp"]:
        raise Wrong("wrap_bare", kind=got["kind"])


q1 = Exercise(
    "3.1",
    "wrap",
    _check_wrap,
    wrap,
    texts=MESSAGES,
    hints=("wrap_move_first", "wrap_device_ids", "wrap_code"),
    mistakes={
        "wrap_cpu_ids": Mistake(hint="wrap_device_ids"),
        "wrap_bare": Mistake(hint="wrap_move_first"),
        "wrap_weights": Mistake(),
        "wrap_buffers": Mistake(),
        "wrap_not_moved": Mistake(hint="wrap_move_first"),
        "wrap_no_ids": Mistake(hint="wrap_device_ids"),
        "wrap_global_ids": Mistake(hint="wrap_device_ids"),
        "wrap_other_ids": Mistake(hint="wrap_device_ids"),
        "wrap_gpu_error": Mistake(),
    },
)
