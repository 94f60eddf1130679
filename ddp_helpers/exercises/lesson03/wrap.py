"""3.1 wrap: the model on this rank's device, wrapped in DDP (the GPU index of each rank)."""

from __future__ import annotations

import os

from ...i18n import messages
from ..kit import (
    Exercise,
    Mistake,
    Phrase,
    Wrong,
    and_list,
    process_group,
    run_on_ranks,
)
from ..space import CHECK_SEED, HIDDEN_SEEDS, Space, on_hidden_seeds, trying

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
            "wrap returned a {kind}, not a DistributedDataParallel: backward() through it "
            "averages no gradients across the ranks, and nothing keeps their copies of the "
            "model equal."
        ),
        "wrap_bare.title": "not wrapped in DistributedDataParallel",
        "wrap_inner": (
            "wrap built a DistributedDataParallel and returned the model inside it (its "
            ".module, a {kind}): DDP's constructor gives that model rank 0's weights, but "
            "backward() through it averages no gradients across the ranks, so the copies drift "
            "apart. Return the DDP itself."
        ),
        "wrap_inner.title": "returned the model inside the DDP, not the DDP",
        "wrap_kept": (
            "Called again in the same process with another model, wrap returned the "
            "DistributedDataParallel of its first call's model: it kept what the first call "
            "built. Wrap the model it is given, on every call."
        ),
        "wrap_kept.title": "returned what its first call built",
        "wrap_dtype": (
            "wrap changed the dtype of the model it was given: its parameters were {want}, "
            "the wrapped model's are {got}. Move the model with .to(device) alone: its dtype "
            "is the caller's choice."
        ),
        "wrap_dtype.title": "changed the model's dtype",
        "wrap_cpu_ids": (
            "On the CPU, DDP refused the device_ids it was given ({error}). device_ids is "
            "for a model on one GPU; a model on the CPU is wrapped without it. (The check's "
            "machine has a GPU, too few for its ranks: the set-up chose the CPU, so go by "
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
            "On {machines} pretend machines with {gpus} GPUs each, rank {rank} (local rank "
            "{local} on machine {node}) was given {device}, but its model was {where} when DDP "
            "wrapped it. DDP does not move a model: the model must already be on the device it "
            "was given."
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
            "Rank {rank} is local rank {local} on machine {node}, which has GPUs cuda:0 to "
            "cuda:{last}; it was given {device} but wrapped with device_ids={ids}. device_ids "
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
            "On {ranks} CPU ranks whose models started different, wrap called twice in each, "
            "on a float32 and a float64 model, each with a frozen parameter and a buffer: "
            "every rank held rank 0's weights and buffers after it, in the model's own dtype, "
            "without device_ids. On {machines} pretend machines x {gpus} GPUs, each rank's "
            "model went to its cuda:LOCAL_RANK and DDP got device_ids=[LOCAL_RANK]."
        ),
    },
)


def wrap(model, device):
    from torch.nn.parallel import DistributedDataParallel as DDP

    return DDP(model.to(device), device_ids=[device.index] if device.type == "cuda" else None)


def _sync_model(kind: str):
    """A model with a buffer (BatchNorm's running statistics) and a frozen parameter: the
    small one, or a deeper one (other layers, other names)."""
    import torch

    nn = torch.nn
    if kind == "small":
        model = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3), nn.Tanh(), nn.Linear(3, 2))
        model[0].bias.requires_grad_(False)
        return model
    model = nn.Sequential(
        nn.Linear(5, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 1)
    )
    model[3].weight.requires_grad_(False)
    return model


def _rank_model(rank: int, kind: str, dtype: str):
    """The model rank `rank` builds: its own seed, its own running mean (a buffer), in `dtype`."""
    import torch

    torch.manual_seed(rank)
    model = _sync_model(kind).to(getattr(torch, dtype))
    with torch.no_grad():
        model[1].running_mean.fill_(rank + 1.0)
    return model


def _wrap_harness(wrap, models):
    """On CPU ranks whose models start different: wrap called on each of `models` (kind,
    dtype) in turn; what it returned each time, and the weights that holds."""
    from unittest import mock

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    built, returned, records = [], [], []
    real_init = DDP.__init__

    def watched(self, *args, **kwargs):  # every DDP the answer builds, really built
        built.append(self)
        real_init(self, *args, **kwargs)

    with process_group():
        # A machine with one GPU for its ranks: set-up chose the CPU, yet CUDA is there. An
        # answer must go by the device it is given, not by whether CUDA exists.
        with (
            mock.patch.object(DDP, "__init__", watched),
            mock.patch("torch.cuda.is_available", return_value=True),
            mock.patch("torch.cuda.device_count", return_value=1),
        ):
            for kind, dtype in models:
                try:
                    wrapped = wrap(_rank_model(dist.get_rank(), kind, dtype), torch.device("cpu"))
                except ValueError as exc:  # DDP refusing device_ids for a CPU model
                    if "device_ids" not in str(exc):
                        raise
                    return [{"error": f"ValueError: {exc}"}]
                records.append(_described(wrapped, built, returned))
                returned.append(wrapped)
    return records


def _described(wrapped, built: list, returned: list) -> dict:
    """What wrap returned, as plain data: a DDP or not (the module of one it built), an
    earlier call's again or not, and the state and dtypes of the model it holds."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    ddp = isinstance(wrapped, DDP)
    inner = wrapped.module if ddp else wrapped
    state = {k: v.detach().cpu().clone() for k, v in inner.state_dict().items()}
    return {
        "ddp": ddp,
        "kind": type(wrapped).__name__,
        "inner": not ddp and any(wrapped is d.module for d in built),
        "again": any(wrapped is r for r in returned),
        "state": state,
        "dtypes": sorted({str(p.dtype).removeprefix("torch.") for p in inner.parameters()}),
    }


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
    seen, built = {"moved_to": [], "wrapped": []}, []

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
        built.append(self)
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
    keys = ("RANK", "LOCAL_RANK", "GROUP_RANK", "GROUP_WORLD_SIZE", "LOCAL_WORLD_SIZE")
    env = {k: int(os.environ[k]) for k in keys}
    kind, ddp = type(wrapped).__name__, isinstance(wrapped, DDP)
    inner = not ddp and any(wrapped is d.module for d in built)
    return {**env, **seen, "ddp": ddp, "inner": inner, "kind": kind, "error": error}


# Each seed's draw: the CPU ranks, the models wrap is called on in turn in each (kind,
# dtype), and the pretend GPU machines (machines, GPUs a machine: a rank for each GPU).
WRAP_DRAWS = {
    CHECK_SEED: (3, (("small", "float32"), ("deep", "float64")), (2, 2)),
    HIDDEN_SEEDS[0]: (2, (("deep", "float64"), ("small", "float32")), (2, 3)),
    HIDDEN_SEEDS[1]: (4, (("deep", "float32"), ("small", "float64")), (3, 2)),
}
SPACE = Space(
    drawn={
        "world": (2, 3, 4, 6),
        "machines": (1, 2, 3),
        "calls": (2,),
        "dtypes": ("float32", "float64"),
        "model": ("frozen", "buffer"),
        "device": ("cpu", "cuda:LOCAL_RANK on pretend GPU machines"),
    },
    why_not={
        "steps": "it wraps once a model: what is called again is drawn as calls",
        "counts": "it is given no count",
        "lengths": "it is given no data: a model and a device",
    },
)


def _check_wrap(fn, seed: int = CHECK_SEED) -> Phrase:
    ranks, models, (machines, gpus) = WRAP_DRAWS[seed]
    results = run_on_ranks(_wrap_harness, fn, models, nprocs=ranks)
    if "error" in results[0][0]:
        raise Wrong("wrap_cpu_ids", error=results[0][0]["error"])
    for call, (kind, dtype) in enumerate(models):
        with trying(ranks=ranks, machines=1, dtype=dtype, call=call + 1 if call else None):
            _judge_call([r[call] for r in results], kind, dtype, call)
    runs = run_on_ranks(_pretend_gpu_harness, fn, nprocs=machines * gpus, nnodes=machines)
    for got in runs:
        with trying(ranks=machines * gpus, machines=machines):
            _check_pretend_gpu_rank(got)
    return Phrase("wrap_ok", ranks=ranks, machines=machines, gpus=gpus)


def _judge_call(records: list[dict], kind: str, dtype: str, call: int) -> None:
    """One call of wrap on every rank: a DDP of this call's model, holding rank 0's weights
    and buffers in the model's dtype; or the Wrong that names what it returned."""
    expected = _rank_model(0, kind, dtype).state_dict()
    buffers = {name for name, _ in _sync_model(kind).named_buffers()}
    for rank, got in enumerate(records):
        if not got["ddp"]:
            raise Wrong("wrap_inner" if got["inner"] else "wrap_bare", kind=got["kind"])
        if call and (got["again"] or set(got["state"]) != set(expected)):
            raise Wrong("wrap_kept")
        if got["dtypes"] != [dtype]:
            raise Wrong("wrap_dtype", want=dtype, got=and_list(got["dtypes"]))
        for name, want in expected.items():
            if not got["state"][name].equal(want):
                raise Wrong("wrap_buffers" if name in buffers else "wrap_weights", rank=rank)


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
            machines, gpus = got["GROUP_WORLD_SIZE"], got["LOCAL_WORLD_SIZE"]
            raise Wrong("wrap_not_moved", where=place, machines=machines, gpus=gpus, **where)
        ids = wrapped["device_ids"]
        if ids is None:
            raise Wrong("wrap_no_ids", **where)
        if ids == [rank] and rank != local:
            raise Wrong("wrap_global_ids", ids=ids, last=got["LOCAL_WORLD_SIZE"] - 1, **where)
        if ids != [local]:
            raise Wrong("wrap_other_ids", ids=ids, **where)
    if got["error"] is not None:
        raise Wrong("wrap_gpu_error", error=got["error"], rank=rank)
    if not got["ddp"]:
        raise Wrong("wrap_inner" if got["inner"] else "wrap_bare", kind=got["kind"])


exercise = Exercise(
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
        "wrap_inner": Mistake(hint="wrap_move_first"),
        "wrap_kept": Mistake(),
        "wrap_dtype": Mistake(),
    },
    hidden=on_hidden_seeds(_check_wrap),
    space=SPACE,
)
