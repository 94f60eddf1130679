"""Exercises of lesson 03, wrapping the model (`from ddp_helpers.exercises import lesson03`)."""

from __future__ import annotations

import os

from ..i18n import messages
from ._core import Exercise, Listed, Mistake, Phrase, Wrong, run_on_ranks
from ._core import progress as _progress

MESSAGES = messages(
    "exercises.lesson03",
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
        "hint.sync_communicate": (
            "Looking at this rank's own copy tells you nothing about the other ranks: you "
            "have to communicate. Broadcast rank 0's copy of each tensor and compare, or "
            "all_gather them."
        ),
        "hint.sync_every_tensor": (
            "Every tensor that can differ counts: every parameter (weights and biases, the "
            "last one too) and every buffer (BatchNorm's running statistics, "
            "model.buffers())."
        ),
        "hint.sync_same_answer": (
            "Every rank must return the same answer. Count the differences on each rank, "
            "then all_reduce that count so every rank sees the total."
        ),
        "hint.sync_code": (
            "For each t in [*model.parameters(), *model.buffers()]: broadcast a clone from "
            "rank 0 and add (clone != t).sum() to a counter on the model's device; "
            "all_reduce the counter; return counter.item() == 0."
        ),
        "sync_before": (
            "Before wrapping, the ranks' models were built with different seeds, yet "
            "params_in_sync returned True on rank {rank}."
        ),
        "sync_before.title": "True for models that differ",
        "sync_wrap": (
            "Right after DDP(model) every rank holds rank 0's weights and buffers (DDP "
            "broadcasts them), but params_in_sync returned False on rank {rank}."
        ),
        "sync_wrap.title": "False for models in sync",
        "sync_local": (
            "After rank 1 changed its copy, params_in_sync still returned True on rank "
            "{rank} every time: it must compare with the other ranks, not only look at its "
            "own copy."
        ),
        "sync_local.title": "looks only at its own rank's copy",
        "sync_missed": (
            "After rank 1 changed {what}, params_in_sync still returned True on rank "
            "{rank}: a difference anywhere in the model counts."
        ),
        "sync_missed.title": "some tensors not compared",
        "sync_disagree": (
            "The ranks disagree ({cases}; per rank): {answers}. Every rank must return the "
            "same answer."
        ),
        "sync_disagree.title": "the ranks return different answers",
        "case_before": "before",
        "case_after_wrapping": "after wrapping",
        "change_first_weight": "the first weight",
        "change_middle_bias": "a bias in the middle",
        "change_last_parameter": "the last parameter",
        "change_buffer": "a buffer (BatchNorm's running mean)",
        "sync_ok": (
            "False before wrapping, True after, False after rank 1 changed a weight, a "
            "bias, the last parameter or a buffer; the same answer on every rank."
        ),
        "hint.ratio_average": (
            "DDP averages the ranks' gradients. With a summed loss each rank's gradient is "
            "the sum over its own rows only."
        ),
        "hint.ratio_sums": (
            "One process, summed loss over all B rows: gradient G. Two ranks, each summing "
            "over B/2 rows, averaged by DDP: (G1 + G2) / 2 = G / 2."
        ),
        "ratio_inverse": (
            "The other way round: DDP averages the ranks' gradients, dividing by the number "
            "of ranks, so its update is smaller."
        ),
        "ratio_inverse.title": "the inverse ratio",
        "ratio_other": (
            "{got} is not it. With a summed loss, each rank's gradient sums over its own "
            "rows; what does DDP then do with the ranks' gradients, and how does that "
            "compare with one process summing over all rows?"
        ),
        "ratio_other.title": "another ratio",
        "ratio_ok": "DDP's update is 1 / world_size = 0.5 of the single-process one.",
        "gpus_idle": (
            "CUDA is available, but this process sees {gpus} GPU(s) for the {ranks} ranks of "
            "its machine (LOCAL_WORLD_SIZE), so setup() chose gloo and this rank works on the "
            "CPU. A scheduler that gives each task one GPU (CUDA_VISIBLE_DEVICES set per rank, "
            "e.g. SLURM's --gpus-per-task=1) does this: every rank then sees one GPU, cuda:0. "
            "Let each task see all of its machine's GPUs, or pin cuda:0 when each rank sees "
            "exactly one."
        ),
    },
)


def warn_if_gpus_idle() -> None:
    """Lesson 03's setup(): warn when CUDA is here but the backend rule still chose gloo."""
    import warnings

    import torch

    if torch.cuda.is_available():
        gpus, ranks = torch.cuda.device_count(), os.environ.get("LOCAL_WORLD_SIZE", "?")
        warnings.warn(MESSAGES["gpus_idle"].format(gpus=gpus, ranks=ranks), stacklevel=2)


def setup():
    """Exercise 2.2's set-up, as lesson 03's cells use it, with the warning above."""
    import torch
    import torch.distributed as dist

    if torch.cuda.device_count() < int(os.environ["LOCAL_WORLD_SIZE"]):  # no GPU per rank
        warn_if_gpus_idle()  # CUDA here, yet too few GPUs seen: say why
        dist.init_process_group("gloo")
        return torch.device("cpu")
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    torch.cuda.set_device(device)  # pin: this process's GPU from now on
    dist.init_process_group("nccl", device_id=device)
    return device


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

    dist.init_process_group("gloo")
    try:
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
    finally:
        dist.destroy_process_group()


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
    import os
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


def params_in_sync(model):
    import torch
    import torch.distributed as dist

    differ = torch.zeros(1, device=next(model.parameters()).device)  # nccl: on the GPU
    for t in [*model.parameters(), *model.buffers()]:  # buffers: BatchNorm's statistics
        rank0 = t.detach().clone()
        dist.broadcast(rank0, src=0)  # every rank gets rank 0's copy
        differ += (rank0 != t).sum()
    dist.all_reduce(differ)  # so that every rank gives the same answer
    return differ.item() == 0


# What rank 1 changes in its copy after wrapping, one at a time: (what, tensor name).
SYNC_CHANGES = [
    ("change_first_weight", "0.weight"),
    ("change_middle_bias", "1.bias"),
    ("change_last_parameter", "3.bias"),
    ("change_buffer", "1.running_mean"),
]


def _params_in_sync_harness(params_in_sync):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    try:
        torch.manual_seed(dist.get_rank())  # a different start on every rank
        model = _sync_model()
        answers = {"case_before": bool(params_in_sync(model))}
        ddp = DDP(model)
        answers["case_after_wrapping"] = bool(params_in_sync(ddp))
        state = ddp.module.state_dict()
        for what, name in SYNC_CHANGES:
            saved = state[name].clone()
            if dist.get_rank() == 1:
                with torch.no_grad():
                    state[name].view(-1)[-1] += 0.5
            answers[what] = bool(params_in_sync(ddp))
            with torch.no_grad():
                state[name].copy_(saved)
        return answers
    finally:
        dist.destroy_process_group()


def _check_sync(fn) -> Phrase:
    answers = run_on_ranks(_params_in_sync_harness, fn, nprocs=2)
    if answers[0] != answers[1]:
        cases = Listed(Phrase(case) for case in answers[0])
        table = [list(a.values()) for a in answers]
        raise Wrong("sync_disagree", cases=cases, answers=table)
    for rank, got in enumerate(answers):
        if not got["case_after_wrapping"]:
            raise Wrong("sync_wrap", rank=rank)
        missed = [what for what, _ in SYNC_CHANGES if got[what]]
        if len(missed) == len(SYNC_CHANGES):
            raise Wrong("sync_local", rank=rank)
        if missed:
            raise Wrong("sync_missed", what=Phrase(missed[0]), rank=rank)
        if got["case_before"]:
            raise Wrong("sync_before", rank=rank)
    return Phrase("sync_ok")


STEPS, BATCH = 20, 8


def make_model():
    """The small regression model of lessons 03 and 04 (seeded, so every run agrees)."""
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def make_batches(steps=STEPS, batch=BATCH):
    """`steps` batches of `batch` rows: inputs (steps, batch, 8) and targets (steps, batch, 1)."""
    import torch

    gen = torch.Generator().manual_seed(1)
    x = torch.randn(steps, batch, 8, generator=gen)
    return x, x.sum(-1, keepdim=True).sin() + 0.1 * torch.randn(steps, batch, 1, generator=gen)


def predict_summed_loss_ratio():
    return 0.5


def _check_ratio(fn) -> Phrase:
    got = float(fn())
    if abs(got - 0.5) < 1e-6:
        return Phrase("ratio_ok")
    if abs(got - 2.0) < 1e-6:
        raise Wrong("ratio_inverse")
    raise Wrong("ratio_other", got=got)


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
q2 = Exercise(
    "3.2",
    "params_in_sync",
    _check_sync,
    params_in_sync,
    texts=MESSAGES,
    hints=("sync_communicate", "sync_every_tensor", "sync_same_answer", "sync_code"),
    mistakes={
        "sync_disagree": Mistake(hint="sync_same_answer"),
        "sync_wrap": Mistake(hint="sync_every_tensor"),
        "sync_local": Mistake(hint="sync_communicate"),
        "sync_missed": Mistake(hint="sync_every_tensor"),
        "sync_before": Mistake(hint="sync_communicate"),
        "hang": Mistake(hint="sync_same_answer"),
        "mismatch": Mistake(hint="sync_same_answer"),
    },
)
q3 = Exercise(
    "3.3",
    "predict_summed_loss_ratio",
    _check_ratio,
    predict_summed_loss_ratio,
    texts=MESSAGES,
    hints=("ratio_average", "ratio_sums"),
    mistakes={
        "ratio_inverse": Mistake(hint="ratio_average"),
        "ratio_other": Mistake(hint="ratio_average"),
    },
)
EXERCISES = [q1, q2, q3]


def progress() -> None:
    """Which exercises of lesson 03 pass, checked against this notebook's definitions."""
    _progress(EXERCISES, "03")
