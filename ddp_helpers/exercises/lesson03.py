"""Exercises of lesson 03, wrapping the model (`from ddp_helpers.exercises import lesson03`)."""

from __future__ import annotations

import os

from ..i18n import messages
from ._core import (
    Exercise,
    Listed,
    Mistake,
    Phrase,
    Wrong,
    answers_to,
    call,
    process_group,
    run_answer,
    run_on_ranks,
    sayer,
    weights_apart,
)
from ._core import progress as _progress
from .devices import made_off_device
from .mini_ddp import buckets_for as buckets_for  # exercise 3.6 lays out its buckets with it
from .mini_ddp import exercise as q6
from .mini_ddp import mini_ddp_timeline as mini_ddp_timeline

# This lesson's cells and checks wrap models in DDP: its notebook's %load_ext and the grader's
# scorer ask the launcher to expect it (launcher.expect_ddp); importing it changes nothing.
BUILDS_DDP = True

MESSAGES = messages(
    "exercises.lesson03",
    {
        "speedup": "{name}: speed-up on 2 ranks {speedup:.2f} (measured), limit 2",
        # What communication costs (Going further): the fit, then a DDP step predicted.
        "cores_line": "cores on this machine: {cores} (measured)",
        "fit_line": (
            "{n} ranks: latency a step, µs: {alpha:.0f} (fitted); "
            "bandwidth, GB/s: {beta:.2f} (fitted)"
        ),
        "buckets_line": "buckets: {count}, {mib:.1f} MiB",
        "predicted_line": "the ring model's prediction for them, ms: {ms:.1f} (predicted)",
        "alone_line": "each bucket's all_reduce timed alone, summed, ms: {ms:.1f} (measured)",
        "span_line": "span of a step's all-reduces, backward included, ms: {ms:.1f} (measured)",
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
        "hint.avg_divide": (
            "all_reduce with the default op SUM adds every rank's tensor; DDP averages, so "
            "divide by the world size afterwards (or ask all_reduce for ReduceOp.AVG)."
        ),
        "hint.avg_same_calls": (
            "Every rank must make the same collective calls in the same order. A call "
            "inside `if rank == 0:` leaves the other ranks out and the job hangs."
        ),
        "hint.avg_code": (
            "Loop over model.parameters(); skip a parameter whose .grad is None; call "
            "dist.all_reduce(p.grad) on every rank, then p.grad /= dist.get_world_size()."
        ),
        "avg_sum": (
            "On {ranks} ranks your gradients are {ratio:.2f} times DDP's: all_reduce sums, "
            "so divide by the world size to get the average DDP uses."
        ),
        "avg_sum.title": "summed, not averaged",
        "avg_unchanged": (
            "The gradients did not change: each rank still has only its own. all_reduce "
            "them across the ranks."
        ),
        "avg_unchanged.title": "the gradients were not reduced",
        "avg_local": (
            "On {machines} machines x {local} ranks your gradients are {machines} times "
            "DDP's: they were divided by the ranks of one machine ({local}, "
            "LOCAL_WORLD_SIZE), not by all {ranks} (dist.get_world_size())."
        ),
        "avg_local.title": "divided by one machine's ranks, not the world size",
        "avg_differ": (
            "On {ranks} ranks ({machines} machine(s)) your gradients differ from DDP's by up "
            "to {diff:.3g} (allowed: 1e-6)."
        ),
        "avg_differ.title": "other gradients than DDP's",
        "avg_ok": (
            "Equal to DDP's averaged gradients (max difference {diff:.1e}) on 2 and 3 "
            "ranks and on 2 machines x 2 ranks; every tensor it sent made on the model's "
            "device."
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
        "hint.accum_no_sync": (
            "DDP decides at the forward: a micro-batch whose forward runs inside `with "
            "model.no_sync():` only adds to each .grad in its backward(); one whose forward "
            "runs outside it all-reduces the sum in its backward(). So every micro-batch but "
            "the step's last runs its forward and backward() inside no_sync(), and the last "
            "one outside."
        ),
        "hint.accum_mean": (
            "k backward() calls add k gradients. To get the gradient of the step's mean loss, "
            "divide each micro-batch's loss by k before backward()."
        ),
        "hint.accum_step": (
            "One optimizer step per k micro-batches: step (and zero the gradients) after the "
            "step's last micro-batch only, once its backward() has averaged them."
        ),
        "hint.accum_code": (
            "for i, (x, y) in enumerate(micro_batches): last = (i + 1) % k == 0; with "
            "contextlib.nullcontext() if last else model.no_sync(): "
            "(mse_loss(model(x), y) / k).backward(); then if last: optimizer.step(); "
            "optimizer.zero_grad()."
        ),
        "accum_no_sync": (
            "DDP all-reduced {got} times for {steps} optimizer steps: every micro-batch's "
            "backward() exchanged the gradients. Only the step's last needs to."
        ),
        "accum_no_sync.title": "no no_sync(): an all-reduce per micro-batch",
        "accum_forward_outside": (
            "DDP all-reduced {got} times for {steps} optimizer steps although no_sync() was "
            "used: each forward ran outside it. DDP decides at the forward whether the "
            "backward all-reduces; a backward() inside no_sync() after a forward outside it "
            "all-reduces all the same. Put the forward inside the `with` too."
        ),
        "accum_forward_outside.title": "no_sync() around the backward only, not the forward",
        "accum_not_zeroed": (
            "The weights are those of one process that never zeroes its gradients: each "
            "step added the earlier steps' gradients again. Zero them after every optimizer "
            "step (optimizer.zero_grad())."
        ),
        "accum_not_zeroed.title": "the gradients never zeroed between steps",
        "accum_reduces": (
            "DDP all-reduced {got} times for {steps} optimizer steps; one all-reduce a step "
            "is what accumulation is for."
        ),
        "accum_reduces.title": "not one all-reduce per optimizer step",
        "accum_step_each": (
            "The optimizer stepped {got} times: once per micro-batch. With {k} micro-batches "
            "a step it steps {steps} times, after each step's last."
        ),
        "accum_step_each.title": "an optimizer step on every micro-batch",
        "accum_steps": (
            "The optimizer stepped {got} times; {steps} steps of {k} micro-batches each."
        ),
        "accum_steps.title": "not one optimizer step per k micro-batches",
        "accum_ranks_differ": (
            "The ranks ended with different weights (by up to {diff:.1e}): some micro-batches' "
            "gradients were never averaged. The all-reduce belongs to the step's last "
            "micro-batch, when the .grad holds all of them."
        ),
        "accum_ranks_differ.title": "the all-reduce before the step's last micro-batch",
        "accum_not_divided": (
            "The weights are those of one process with a learning rate {k} times larger: "
            "the {k} micro-batches' gradients were added up, not averaged."
        ),
        "accum_not_divided.title": "the loss not divided by k",
        "accum_weights": (
            "The final weights differ from one process's on the global batches (micro-batch "
            "x k x world size = {rows} rows a step) by up to {diff:.2e} (allowed: {tol:g})."
        ),
        "accum_weights.title": "not the weights of one process on the global batch",
        "accum_ok": (
            "On {ranks} ranks, {steps} optimizer steps of {k} micro-batches of {micro} rows: "
            "the weights of one process on global batches of {rows} rows, and {steps} "
            "all-reduces, one a step; the same on {ranks2} ranks with {k2} micro-batches a "
            "step (max |dW| = {diff:.1e})."
        ),
        "hint.bytes_ring": (
            "A ring all-reduce is a reduce-scatter (N - 1 steps) then an all-gather (N - 1 "
            "steps); in each step every rank sends one N-th of the tensor to its neighbour."
        ),
        "hint.bytes_size": "A float32 gradient takes 4 bytes: the tensor is 4 x params bytes.",
        "hint.bytes_formula": "2 x (world_size - 1) / world_size x 4 x params.",
        "bytes_no_float": ("{got:.0f} bytes counts gradients, not bytes: each float32 takes 4."),
        "bytes_no_float.title": "params, not bytes",
        "bytes_one_pass": (
            "{got:.0f} bytes is one pass around the ring, the reduce-scatter; the all-gather "
            "that follows sends as much again."
        ),
        "bytes_one_pass.title": "the reduce-scatter only",
        "bytes_whole_tensor": (
            "{got:.0f} bytes sends the whole tensor twice; in a ring each step sends one N-th "
            "of it, 2(N - 1) steps in all."
        ),
        "bytes_whole_tensor.title": "the whole tensor at each step",
        "bytes_whole_each_step": (
            "{got:.0f} bytes sends the whole tensor at each of the 2(N - 1) steps; in a ring "
            "each step sends one N-th of it."
        ),
        "bytes_whole_each_step.title": "the whole tensor at each of the 2(N - 1) steps",
        "bytes_to_everyone": (
            "{got:.0f} bytes sends every other rank the whole tensor, as a naive exchange "
            "would; the ring sends less than twice the tensor, whatever N."
        ),
        "bytes_to_everyone.title": "every rank sent the whole tensor",
        "bytes_other": "{got!r} is not it, for {params} parameters on {world} ranks.",
        "bytes_other.title": "another number",
        "bytes_ok": (
            "2(N - 1)/N x 4 x params: {cases}. It tends to twice the gradients' bytes, "
            "whatever the number of ranks."
        ),
        "bytes_case": "{bytes:.0f} bytes for {params} parameters on {world} ranks",
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
say = sayer(MESSAGES)


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


def average_gradients(model):
    import torch.distributed as dist

    world_size = dist.get_world_size()
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)  # SUM over the ranks ...
            p.grad /= world_size  # ... then divide (DDP divides first, then sums)


def _average_gradients_harness(average_gradients):
    """On each rank: the learner's averaging next to DDP's, on the same data."""
    import copy

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    with process_group():
        rank = dist.get_rank()
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
        ddp = DDP(copy.deepcopy(model))
        gen = torch.Generator().manual_seed(100 + rank)
        x, y = torch.randn(16, 4, generator=gen), torch.randn(16, 2, generator=gen)
        torch.nn.functional.mse_loss(model(x), y).backward()
        local = [p.grad.clone() for p in model.parameters()]
        average_gradients(model)
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        mine = torch.cat([p.grad.flatten() for p in model.parameters()])
        theirs = torch.cat([p.grad.flatten() for p in ddp.module.parameters()])
        unchanged = all(
            torch.equal(a, p.grad) for a, p in zip(local, model.parameters(), strict=True)
        )
        diff = (mine - theirs).abs().max().item()
        ratio = (mine.norm() / theirs.norm()).item()
        off_device = made_off_device(average_gradients, model)
        return {"diff": diff, "ratio": ratio, "unchanged": unchanged, "off_device": off_device}


# (ranks, machines): two world sizes on one machine, and 2 machines x 2 ranks, where the
# ranks of one machine (LOCAL_WORLD_SIZE) are not all of them.
AVG_RUNS = ((2, 1), (3, 1), (4, 2))


def _check_average(fn) -> Phrase:
    worst_diff, off_device = 0.0, []
    for ranks, machines in AVG_RUNS:
        results = run_on_ranks(_average_gradients_harness, fn, nprocs=ranks, nnodes=machines)
        worst = max(results, key=lambda r: r["diff"])
        off_device += [r["off_device"] for r in results if r["off_device"]]
        if worst["diff"] <= 1e-6:
            worst_diff = max(worst_diff, worst["diff"])
            continue
        if all(r["unchanged"] for r in results):
            raise Wrong("avg_unchanged")
        if abs(worst["ratio"] - ranks) < 0.05:
            raise Wrong("avg_sum", ratio=worst["ratio"], ranks=ranks)
        if machines > 1 and abs(worst["ratio"] - machines) < 0.05:
            raise Wrong("avg_local", ranks=ranks, machines=machines, local=ranks // machines)
        raise Wrong("avg_differ", diff=worst["diff"], ranks=ranks, machines=machines)
    if off_device:
        raise Wrong("off_device", function="average_gradients", collective=off_device[0])
    return Phrase("avg_ok", diff=worst_diff)


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


# Exercise 3.4: k micro-batches of MICRO rows per rank per optimizer step, ACCUM_STEPS steps;
# (ranks, k): on 2 ranks with 4, then on 3 with 3 (an answer that hard-codes either fails).
ACCUM_STEPS, MICRO, LR = 3, 2, 0.1
ACCUM_RUNS = ((2, 4), (3, 3))
TOLERANCE = 1e-6


def train_accumulated(model, optimizer, micro_batches, k):
    import contextlib

    import torch

    for i, (x, y) in enumerate(micro_batches):
        last = (i + 1) % k == 0  # the step's last micro-batch: DDP all-reduces this one
        with contextlib.nullcontext() if last else model.no_sync():
            loss = torch.nn.functional.mse_loss(model(x), y) / k  # the step's mean
            loss.backward()
        if last:
            optimizer.step()
            optimizer.zero_grad()


def _accumulation_data(world: int, k: int):
    """Each global batch of MICRO x k x world rows, and rank r's micro-batches."""
    x, y = make_batches(ACCUM_STEPS, MICRO * k * world)

    def micro_batches(rank):
        parts = [
            (xs.chunk(world)[rank], ys.chunk(world)[rank]) for xs, ys in zip(x, y, strict=True)
        ]
        return [m for xs, ys in parts for m in zip(xs.split(MICRO), ys.split(MICRO), strict=True)]

    return (x, y), micro_batches


def _accumulation_harness(fn, k):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    with process_group():
        rank, world = dist.get_rank(), dist.get_world_size()
        model, reduces, steps = DDP(make_model()), [], []

        def counting_hook(_, bucket):  # DDP's own arithmetic: divide, then sum
            reduces.append(bucket.index())
            future = dist.all_reduce(bucket.buffer().div_(world), async_op=True).get_future()
            return future.then(lambda f: f.value()[0])

        model.register_comm_hook(None, counting_hook)
        optimizer = torch.optim.SGD(model.parameters(), lr=LR)
        real_step, real_no_sync, no_syncs = optimizer.step, model.no_sync, []
        optimizer.step = lambda *a, **kw: (steps.append(1), real_step(*a, **kw))[1]
        model.no_sync = lambda: (no_syncs.append(1), real_no_sync())[1]  # how often used
        fn(model, optimizer, _accumulation_data(world, k)[1](rank), k)
        weights = {k: v.detach().clone() for k, v in model.module.state_dict().items()}
        counts = {"reduces": len(reduces), "steps": len(steps), "no_syncs": len(no_syncs)}
        return {"weights": weights, **counts}


def _one_process_accumulated(world: int, k: int, lr: float, zeroed: bool = True) -> dict:
    """One process's weights on the global batches; `zeroed`: its gradients zeroed before
    each step (else each step adds the earlier steps' gradients again)."""
    import torch

    (x, y), _ = _accumulation_data(world, k)
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for xs, ys in zip(x, y, strict=True):
        if zeroed:
            optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(xs), ys).backward()
        optimizer.step()
    return model.state_dict()


def _check_accumulated(fn) -> Phrase:
    diffs = [_check_accumulated_on(fn, ranks, k) for ranks, k in ACCUM_RUNS]
    (ranks, k), (ranks2, k2) = ACCUM_RUNS
    return Phrase(
        "accum_ok",
        ranks=ranks,
        k=k,
        micro=MICRO,
        rows=MICRO * k * ranks,
        diff=max(diffs),
        steps=ACCUM_STEPS,
        ranks2=ranks2,
        k2=k2,
    )


def _check_accumulated_on(fn, ranks: int, k: int) -> float:
    """The largest weight difference from one process, on `ranks` ranks with `k`
    micro-batches a step; Wrong for a mistake."""
    runs = run_on_ranks(_accumulation_harness, fn, k, nprocs=ranks)
    counts = {"steps": ACCUM_STEPS, "k": k}
    got = runs[0]
    if got["steps"] == ACCUM_STEPS * k:
        raise Wrong("accum_step_each", got=got["steps"], **counts)
    if got["steps"] != ACCUM_STEPS:
        raise Wrong("accum_steps", got=got["steps"], **counts)
    if got["reduces"] == ACCUM_STEPS * k:
        key = "accum_forward_outside" if got["no_syncs"] else "accum_no_sync"
        raise Wrong(key, got=got["reduces"], steps=ACCUM_STEPS)
    apart = max(weights_apart(runs[0]["weights"], run["weights"]) for run in runs[1:])
    if not apart == 0.0:  # nan included
        raise Wrong("accum_ranks_differ", diff=apart)
    if got["reduces"] != ACCUM_STEPS:
        raise Wrong("accum_reduces", got=got["reduces"], steps=ACCUM_STEPS)
    diff = weights_apart(got["weights"], _one_process_accumulated(ranks, k, LR))
    if diff <= TOLERANCE:
        return diff
    if weights_apart(got["weights"], _one_process_accumulated(ranks, k, LR * k)) <= TOLERANCE:
        raise Wrong("accum_not_divided", k=k)
    unzeroed = _one_process_accumulated(ranks, k, LR, zeroed=False)
    if weights_apart(got["weights"], unzeroed) <= TOLERANCE:
        raise Wrong("accum_not_zeroed")
    rows = MICRO * k * ranks
    raise Wrong("accum_weights", rows=rows, diff=diff, tol=TOLERANCE)


def bytes_sent(params, world_size):
    return 2 * (world_size - 1) / world_size * 4 * params


# (params, world size): exercise 3.5's cases, the lesson's wide model among them.
BYTES_CASES = ((1_000_000, 2), (1_000_000, 4), (1_059_841, 8), (10, 1))


def _ring_bytes(params: int, world: int) -> float:
    return 2 * (world - 1) / world * 4 * params


# What other formulas give, each a mistake of its own: named only when the answer gives
# that formula's number in every case (at 2 ranks several coincide: 4P is the right one).
BYTES_WRONG = {
    "bytes_no_float": lambda p, w: _ring_bytes(p, w) / 4,
    "bytes_one_pass": lambda p, w: _ring_bytes(p, w) / 2,
    "bytes_whole_tensor": lambda p, w: 2 * 4 * p,
    "bytes_whole_each_step": lambda p, w: 2 * (w - 1) * 4 * p,
    "bytes_to_everyone": lambda p, w: (w - 1) * 4 * p,
}


def _close(got, value) -> bool:
    return isinstance(got, (int, float)) and abs(got - value) <= 1e-6 * max(value, 1)


def _check_bytes(fn) -> Phrase:
    answers = list(answers_to(fn, BYTES_CASES))
    for (params, world), got in zip(BYTES_CASES, answers, strict=True):
        if _close(got, _ring_bytes(params, world)):
            continue
        # One rank sends nothing: an answer may say so apart from its formula, so the
        # formulas are matched on the cases with several ranks.
        several = [(case, a) for case, a in zip(BYTES_CASES, answers, strict=True) if case[1] > 1]
        for key, formula in BYTES_WRONG.items():
            if all(_close(a, formula(p, w)) for (p, w), a in several):
                raise Wrong(key, got=got)
        raise Wrong("bytes_other", got=got, params=params, world=world)
    cases = [
        Phrase("bytes_case", world=w, params=p, bytes=_ring_bytes(p, w)) for p, w in BYTES_CASES[:2]
    ]
    return Phrase("bytes_ok", cases=Listed(cases))


def predict_summed_loss_ratio():
    return 0.5


def _check_ratio(fn) -> Phrase:
    got = float(run_answer(call, fn))
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
# On the core path, right before DDP does the same: the average by hand, checked against
# DDP's gradients (moved here from lesson 02's Going further, issue 38).
q2 = Exercise(
    "3.2",
    "average_gradients",
    _check_average,
    average_gradients,
    texts=MESSAGES,
    hints=("avg_divide", "avg_same_calls", "avg_code"),
    mistakes={
        "avg_sum": Mistake(hint="avg_divide"),
        "avg_unchanged": Mistake(hint="avg_divide"),
        "avg_differ": Mistake(hint="avg_divide"),
        "avg_local": Mistake(hint="avg_divide"),
        "off_device": Mistake(),
        "hang": Mistake(hint="avg_same_calls"),
        "mismatch": Mistake(hint="avg_same_calls"),
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
# The pace rule applies (8 lines); the exercise is in Going further, outside the estimate.
q4 = Exercise(
    "3.4",
    "train_accumulated",
    _check_accumulated,
    train_accumulated,
    texts=MESSAGES,
    hints=("accum_no_sync", "accum_mean", "accum_step", "accum_code"),
    mistakes={
        "accum_no_sync": Mistake(hint="accum_no_sync"),
        "accum_forward_outside": Mistake(hint="accum_no_sync"),
        "accum_not_zeroed": Mistake(hint="accum_step"),
        "accum_reduces": Mistake(hint="accum_no_sync"),
        "accum_step_each": Mistake(hint="accum_step"),
        "accum_steps": Mistake(hint="accum_step"),
        "accum_ranks_differ": Mistake(hint="accum_no_sync"),
        "accum_not_divided": Mistake(hint="accum_mean"),
        "accum_weights": Mistake(hint="accum_mean"),
    },
    further=True,
)
q5 = Exercise(
    "3.5",
    "bytes_sent",
    _check_bytes,
    bytes_sent,
    texts=MESSAGES,
    hints=("bytes_ring", "bytes_size", "bytes_formula"),
    mistakes={
        "bytes_no_float": Mistake(hint="bytes_size"),
        "bytes_one_pass": Mistake(hint="bytes_ring"),
        "bytes_whole_tensor": Mistake(hint="bytes_ring"),
        "bytes_whole_each_step": Mistake(hint="bytes_ring"),
        "bytes_to_everyone": Mistake(hint="bytes_ring"),
        "bytes_other": Mistake(hint="bytes_ring"),
    },
    further=True,
)
EXERCISES = [q1, q2, q3, q4, q5, q6]


def progress() -> None:
    """Which exercises of lesson 03 pass, checked against this notebook's definitions."""
    _progress(EXERCISES, "03")
