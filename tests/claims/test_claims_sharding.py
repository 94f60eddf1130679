"""Claims lesson 05 makes about sharding with torch 2.13: FSDP2 (fully_shard on a DeviceMesh),
its state dicts, torch.distributed.checkpoint, ZeroRedundancyOptimizer, and the bytes
DDP and Adam hold and move, on the lesson's model (lesson05/common.py: embed, 3 blocks,
head; head.bias frozen, a buffer `shift`).

The ranks are plain processes (claims_support.plain_job, as torchrun starts them), gloo on
the CPU: one job on 2 ranks and one on 3 (the 3-rank job loads the checkpoint the 2-rank
job saved), and one on 4 (HSDP on a 2 x 2 mesh), each rank writing what it found, fact by
fact, to OUT.RANK (JSON); each test below reads one fact. docs/claims.md names each
claim's cell and its test here.
"""

from __future__ import annotations

import json
import math

import pytest
from claims_support import RANK_RECORDS, plain_job

from ddp_helpers.paths import ROOT

# One script for both jobs: argv = OUT, ROOT, SAVED (where the 2-rank job wrote its
# checkpoint: OUT itself on 2 ranks). What it finds on W ranks, fact by fact.
JOB = (
    r"""
import json
import math
import os
import sys
import threading
import warnings
from contextlib import contextmanager
from datetime import timedelta

OUT, ROOT, SAVED = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, ROOT)
"""
    + RANK_RECORDS
    + r"""

import torch

from ddp_helpers.exercises.lesson05.common import make_batches, make_model, my_rows

if W == 3 and rank == 0:
    # What the 2-rank job's rank 0 wrote with torch.save(model.state_dict()), read here as
    # a plain process reads it: torch alone, then with DTensor imported; no group at all.
    path, plain = f"{SAVED}.rank0.pt", {}
    plain["torch.load"] = said(lambda: torch.load(path))
    import logging
    import torch.distributed.tensor

    # (its DeviceMesh, unpickled without the group, logs a warning: kept off stderr)
    logging.getLogger("torch.distributed.device_mesh").setLevel(logging.ERROR)
    sd = torch.load(path)
    weight = sd["embed.weight"]
    plain.update({
        "embed.weight": [type(weight).__name__, list(weight.shape),
                         list(weight.to_local().shape)],
        "rows": torch.equal(weight.to_local(), make_model().embed.weight.detach()[:8]),
        "full_tensor": said(weight.full_tensor),
        "load_state_dict": said(lambda: make_model().load_state_dict(sd)),
    })
    keep("plain_load", plain)

import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions, get_model_state_dict, get_state_dict, set_state_dict,
)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
mesh = init_device_mesh("cpu", (W,))
F = torch.nn.functional
FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)


def sharded(model=None, mp_policy=None, dtype=None):
    model = model if model is not None else make_model(dtype=dtype)
    kwargs = {"mesh": mesh} if mp_policy is None else {"mesh": mesh, "mp_policy": mp_policy}
    for block in model.blocks:
        fully_shard(block, **kwargs)
    fully_shard(model, **kwargs)
    return model


def step(model, opt, x, y, s):
    opt.zero_grad()
    loss = F.mse_loss(model(my_rows(x[s], rank, W)), my_rows(y[s], rank, W))
    loss.backward()
    opt.step()
    return loss


def trainable(model):
    return [p for p in model.parameters() if p.requires_grad]


def chunk(t):
    # torch.chunk's dim-0 piece for this rank (an empty one where chunk gives fewer)
    pieces = torch.chunk(t, W)
    return pieces[rank] if rank < len(pieces) else t[:0]


@contextmanager
def collectives(log, phase):
    # FSDP2 in 2.13 calls dist.all_gather_single and dist.reduce_scatter_single
    # (_fsdp_collectives.py), torch 2.8's FSDP2 their older names, all_gather_into_tensor
    # and reduce_scatter_tensor (2.13 keeps those as aliases that call the new ones inside
    # torch, past this patch): each call is logged with its bytes in and out, dtype, and
    # (a reduce-scatter) the ReduceOp it asks for, by name.
    def all_gather(real):
        def logged(output_tensor, input_tensor, *args, **kwargs):
            log.append([phase[0], "all_gather", nbytes(input_tensor), nbytes(output_tensor),
                        str(input_tensor.dtype), None])
            return real(output_tensor, input_tensor, *args, **kwargs)
        return logged

    def reduce_scatter(real):
        def logged(output, input, *args, **kwargs):
            op = kwargs.get("op", args[0] if args else dist.ReduceOp.SUM)
            log.append([phase[0], "reduce_scatter", nbytes(input), nbytes(output),
                        str(input.dtype), getattr(op, "name", None) or repr(op)])
            return real(output, input, *args, **kwargs)
        return logged

    kinds = {"all_gather_single": all_gather, "all_gather_into_tensor": all_gather,
             "reduce_scatter_single": reduce_scatter, "reduce_scatter_tensor": reduce_scatter}
    real = {name: getattr(dist, name) for name in kinds if hasattr(dist, name)}
    for name, fn in real.items():
        setattr(dist, name, kinds[name](fn))
    try:
        yield
    finally:
        for name, fn in real.items():
            setattr(dist, name, fn)


def nbytes(t):
    return t.numel() * t.element_size()


@contextmanager
def quiet_stderr():
    # torch's profiler prints a line on fd 2 as it starts and stops (Kineto's
    # "profiler_start"), which no setting silences: dropped, so the job's stderr stays
    # empty (plain_job counts a line there as a fault).
    sys.stderr.flush()
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def gloo_ran(call):
    # What the backend itself ran inside call(): torch.profiler's events named "gloo:..."
    # (ProcessGroupGloo records each op it runs under such a name, with its input), in
    # the order they began, each [name, elements of its input, dtype as the profiler
    # names it].
    from torch.profiler import ProfilerActivity, profile

    with quiet_stderr(), profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        call()
    events = sorted((e for e in prof.events() if e.name.startswith("gloo:")),
                    key=lambda e: e.time_range.start)
    return [[e.name, sum(math.prod(s) for s in e.input_shapes if s), e.input_dtypes[0]]
            for e in events]


def shards():
    whole = {n: p.detach().clone() for n, p in make_model().named_parameters()}
    model = sharded()
    params = {}
    for name, p in model.named_parameters():
        params[name] = {
            "type": type(p).__name__,
            "placements": [repr(x) for x in p.placements] if isinstance(p, DTensor) else None,
            "local": list(p.to_local().shape) if isinstance(p, DTensor) else None,
            "global": list(p.shape),
            "chunk": isinstance(p, DTensor) and torch.equal(p.to_local(), chunk(whole[name])),
            "requires_grad": p.requires_grad,
        }
    buffers = {n: type(b).__name__ for n, b in model.named_buffers()}
    shift = model.shift
    gathered = [torch.zeros_like(shift) for _ in range(W)]
    dist.all_gather(gathered, shift)
    keep("shards", {"params": params, "buffers": buffers,
                    "shift_same": all(torch.equal(gathered[0], g) for g in gathered)})


def training():
    # FSDP2 against DDP, AdamW, 5 steps, each rank its rows of 12, a mean loss.
    # The ReduceOp each of FSDP2's reduce-scatters asks for is logged as it runs.
    result = {}
    for dtype in (torch.float32, torch.float64):
        x, y = make_batches(5, 12, dtype=dtype)
        ddp, fsdp = DDP(make_model(dtype=dtype)), sharded(dtype=dtype)
        opts = [torch.optim.AdamW(trainable(m), lr=1e-2) for m in (ddp, fsdp)]
        losses, params, same, log = 0.0, 0.0, [], []
        for s in range(5):
            a = step(ddp, opts[0], x, y, s)
            with collectives(log, ["step"]):
                b = step(fsdp, opts[1], x, y, s)
            diffs = [(p - q.full_tensor()).abs().max().item()
                     for p, q in zip(ddp.module.parameters(), fsdp.parameters())]
            losses, params = max(losses, (a - b).abs().item()), max(params, max(diffs))
            same.append(a.item() == b.item() and max(diffs) == 0.0)
        result[str(dtype)] = {
            "loss": losses, "param": params, "same": same,
            "reduce_scatters": sum(c[1] == "reduce_scatter" for c in log),
            "reduce_ops": sorted({c[5] for c in log if c[1] == "reduce_scatter"}),
        }
    keep("training", result)


def stale_optimizer():
    x, y = make_batches(2, 12)
    model = make_model()
    opt = torch.optim.AdamW(trainable(model), lr=1e-2)  # built before fully_shard
    sharded(model)
    held = [p for g in opt.param_groups for p in g["params"]]
    before = [p.full_tensor().clone() for p in model.parameters()]
    steps = [said(lambda s=s: step(model, opt, x, y, s)) for s in range(2)]
    keep("stale_optimizer", {
        "holds_a_model_parameter": any(p is q for p in held for q in model.parameters()),
        "holds": sorted({type(p).__name__ for p in held}),
        "steps": steps,
        "unchanged": all(torch.equal(a, p.full_tensor())
                         for a, p in zip(before, model.parameters())),
        "state": len(opt.state),
        "model_has_grads": all(p.grad is not None for p in trainable(model)),
    })


def gathers():
    x, y = make_batches(1, 12)
    result = {}
    for mode in ("blocks", "root"):
        model = make_model()
        if mode == "blocks":
            for block in model.blocks:
                fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        log, phase = [], ["forward"]
        with collectives(log, phase):
            out = model(my_rows(x[0], rank, W))
            after = {n: isinstance(p, DTensor) for n, p in model.named_parameters()}
            phase[0] = "backward"
            F.mse_loss(out, my_rows(y[0], rank, W)).backward()
        result[mode] = {"calls": log, "sharded_after_forward": after}
    keep("gathers", result)


def forward_past_hooks():
    x, y = make_batches(1, 12)
    model, found_here = sharded(), {}
    found_here["fresh"] = said(lambda: model.forward(my_rows(x[0], rank, W)))
    step(model, torch.optim.AdamW(trainable(model), lr=1e-2), x, y, 0)
    found_here["after_a_step"] = said(lambda: model.forward(my_rows(x[0], rank, W)))
    keep("forward_past_hooks", found_here)


def state_dicts():
    model = sharded()
    sd = model.state_dict()
    seen = {k: {"type": type(v).__name__, "global": list(v.shape),
                "local": list(v.to_local().shape) if isinstance(v, DTensor) else None}
            for k, v in sd.items()}
    if rank == 0:
        torch.save(sd, f"{OUT}.rank0.pt")
    full = get_model_state_dict(model, options=FULL)
    whole = make_model().state_dict()
    keep("state_dicts", {
        "state_dict": seen,
        "full": {k: {"type": type(v).__name__, "shape": list(v.shape), "device": str(v.device)}
                 for k, v in full.items()},
        "full_equal": bool(full) and full.keys() == whole.keys()
                      and all(torch.equal(full[k], whole[k]) for k in whole),
    })


def checkpoint_save():
    x, y = make_batches(3, 12)
    model = sharded()
    opt = torch.optim.AdamW(trainable(model), lr=1e-2)
    for s in range(3):
        step(model, opt, x, y, s)
    msd, osd = get_state_dict(model, opt)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=f"{SAVED}.ckpt")
    full_model, full_optim = get_state_dict(model, opt, options=FULL)
    if rank == 0:
        torch.save({"model": full_model, "optim": full_optim}, f"{SAVED}.saved.pt")
    files = sorted(os.listdir(f"{SAVED}.ckpt"))
    # dcp.save on rank 0 alone, in a thread on a group of its own: does it finish within
    # 3 s? Then rank 1 calls it too.
    group, store = dist.new_group(backend="gloo"), dist.distributed_c10d._get_default_store()
    alone = f"{OUT}.alone"
    if rank == 0:
        def save():
            dcp.save({"model": msd}, checkpoint_id=alone, process_group=group)

        thread = threading.Thread(target=save, daemon=True)
        thread.start()
        thread.join(3.0)
        by_itself = {"finished": not thread.is_alive(),
                     "files": sorted(os.listdir(alone)) if os.path.isdir(alone) else []}
        store.set("rank0_waited", "1")
        thread.join(60.0)
        joined = {"finished": not thread.is_alive(), "files": sorted(os.listdir(alone))}
    else:
        store.wait(["rank0_waited"], timedelta(seconds=60))
        dcp.save({"model": msd}, checkpoint_id=alone, process_group=group)
        by_itself = joined = None
    dist.barrier()
    exp_avg = osd["state"]["embed.weight"]["exp_avg"]
    keep("checkpoint_save", {"files": files, "rank0_alone": by_itself, "then_joined": joined,
                             "exp_avg_type": type(exp_avg).__name__})


def checkpoint_load():
    model = sharded()
    opt = torch.optim.AdamW(trainable(model), lr=1e-2)
    saved = torch.load(f"{SAVED}.saved.pt")
    msd, osd = get_state_dict(model, opt)  # a fresh optimizer's state: step 0, zeros

    def equal(model_sd, optim_sd):
        params = model_sd.keys() == saved["model"].keys() and all(
            torch.equal(model_sd[k], saved["model"][k]) for k in saved["model"])
        ref = saved["optim"]["state"]
        state = optim_sd["state"].keys() == ref.keys() and all(
            optim_sd["state"][k].keys() == ref[k].keys()
            and all(torch.equal(optim_sd["state"][k][s], ref[k][s]) for s in ref[k])
            for k in ref)
        return {"params": params, "adam": state}

    every = StateDictOptions(full_state_dict=True)  # whole on every rank (no cpu_offload)
    before = equal(*get_state_dict(model, opt, options=every))
    state = {"model": msd, "optim": osd}
    dcp.load(state, checkpoint_id=f"{SAVED}.ckpt")
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    after = equal(*get_state_dict(model, opt, options=every))
    mine = opt.state[model.embed.weight]
    keep("checkpoint_load", {
        "before": before, "after": after,
        "adam_keys": sorted(saved["optim"]["state"]["embed.weight"]),
        "adam_step": saved["optim"]["state"]["embed.weight"]["step"].item(),
        "local_exp_avg": list(mine["exp_avg"].to_local().shape),
    })


def zero():
    x, y = make_batches(3, 12)
    plain, zeroed = DDP(make_model()), DDP(make_model())
    names = {id(p): n for n, p in zeroed.module.named_parameters()}
    opts = [torch.optim.AdamW(plain.parameters(), lr=1e-2),
            ZeroRedundancyOptimizer(zeroed.parameters(), optimizer_class=torch.optim.AdamW,
                                    lr=1e-2)]
    for s in range(3):
        step(plain, opts[0], x, y, s)
        step(zeroed, opts[1], x, y, s)
    local = opts[1].optim

    def elements(opt):
        return sum(v.numel() for st in opt.state.values() for k, v in st.items() if k != "step")

    keep("zero", {
        "equal": all(torch.equal(p, q) for p, q in zip(plain.parameters(), zeroed.parameters())),
        "mine": [names[id(p)] for g in local.param_groups for p in g["params"]],
        "with_state": sorted(names[id(p)] for p in local.state),
        "elements": elements(local),
        "plain_elements": elements(opts[0]),
    })


def ddp_bytes():
    result = {}
    x, y = make_batches(2, 12)
    for dtype in (torch.float32, torch.bfloat16):
        model, sent = DDP(make_model(dtype=dtype)), []

        def hook(state, bucket):  # records each bucket, then averages it as DDP does
            buf = bucket.buffer()
            sent[-1].append([nbytes(buf), str(buf.dtype)])
            return dist.all_reduce(buf.div_(W), async_op=True).get_future().then(
                lambda f: f.value()[0])

        model.register_comm_hook(None, hook)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        for s in range(2):
            sent.append([])
            opt.zero_grad()
            F.mse_loss(model(my_rows(x[s], rank, W).to(dtype)),
                       my_rows(y[s], rank, W).to(dtype)).backward()
            opt.step()
        params = trainable(model)
        state = opt.state[model.module.embed.weight]
        result[str(dtype)] = {
            "buckets": sent,
            "parameters": sum(p.numel() for p in model.parameters()),
            "trainable": sum(p.numel() for p in params),
            "param_bytes": sum(nbytes(p) for p in params),
            "grad_bytes": sum(nbytes(p.grad) for p in params),
            "adam_bytes": sum(nbytes(v) for st in opt.state.values()
                              for k, v in st.items() if k != "step"),
            "grad_dtypes": sorted({str(p.grad.dtype) for p in params}),
            "state": {k: [str(v.dtype), list(v.shape)] for k, v in state.items()},
            "state_of_frozen": model.module.head.bias in opt.state,
        }
    keep("ddp_bytes", result)


def mixed_precision():
    x, y = make_batches(1, 12)
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    model, inside = make_model(), []
    for name in ("embed", "blocks.1.linear", "head"):
        model.get_submodule(name).register_forward_pre_hook(
            lambda mod, args, name=name: inside.append([name, str(mod.weight.dtype)]))
    sharded(model, mp_policy=policy)
    log = []
    with collectives(log, ["step"]):
        out = model(my_rows(x[0], rank, W))
        F.mse_loss(out.float(), my_rows(y[0], rank, W)).backward()
    keep("mixed_precision", {
        "inside": inside,
        "output": str(out.dtype),
        "sharded": sorted({f"{type(p).__name__} {p.dtype}" for p in model.parameters()}),
        "grads": sorted({f"{type(p.grad).__name__} {p.grad.dtype}"
                         for p in model.parameters() if p.grad is not None}),
        "collectives": sorted({f"{kind} {dtype}" for _, kind, _, _, dtype, _ in log}),
    })


def gloo_reduce_scatter():
    # What gloo runs for a reduce-scatter: called directly (reduce_scatter_single, its
    # deprecated alias reduce_scatter_tensor, and the list form dist.reduce_scatter), each
    # rank giving arange(5 W) + rank; then for every collective of one FSDP2 training step
    # (forward, backward, AdamW; the second step, the first having made the optimizer's
    # state), side by side with the calls FSDP2 made.
    x = torch.arange(5 * W, dtype=torch.float32) + rank
    total = W * torch.arange(5 * W, dtype=torch.float32) + W * (W - 1) / 2
    mine = total[5 * rank:5 * rank + 5]
    direct, out = {}, torch.empty(5)
    for op in ("SUM", "AVG"):
        ran = gloo_ran(lambda: dist.reduce_scatter_single(out, x, op=getattr(dist.ReduceOp, op)))
        direct[f"reduce_scatter_single {op}"] = {
            "gloo": ran, "mine": torch.equal(out, mine / (W if op == "AVG" else 1))}
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        ran = gloo_ran(lambda: dist.reduce_scatter_tensor(out, x))
    direct["reduce_scatter_tensor"] = {
        "gloo": ran, "mine": torch.equal(out, mine),
        "warned": [f"{w.category.__name__}: {w.message}" for w in warned]}
    ran = gloo_ran(lambda: dist.reduce_scatter(out, list(x.chunk(W))))
    direct["reduce_scatter (list)"] = {"gloo": ran, "mine": torch.equal(out, mine)}

    xs, ys = make_batches(2, 12)
    model = sharded()
    opt = torch.optim.AdamW(trainable(model), lr=1e-2)
    step(model, opt, xs, ys, 0)
    log = []
    with collectives(log, ["step"]):
        ran = gloo_ran(lambda: step(model, opt, xs, ys, 1))
    keep("gloo_reduce_scatter", {
        "direct": direct,
        "fsdp_calls": [[c[1], c[2] // 4, c[3] // 4] for c in log],  # float32: elements
        "fsdp_gloo": ran,
    })


def hsdp():
    # HSDP: each block then the root fully_shard on a 2-D mesh, replicated along its first
    # dim, sharded along its second; AdamW, 3 steps, each rank its 3 rows of 12.
    mesh2 = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))
    whole = {n: p.detach().clone() for n, p in make_model().named_parameters()}
    model = make_model()
    for block in model.blocks:
        fully_shard(block, mesh=mesh2)
    fully_shard(model, mesh=mesh2)
    coordinate = mesh2.get_coordinate()
    held = {n: p.to_local().detach().clone() for n, p in model.named_parameters()}
    everyone = [None] * W
    dist.all_gather_object(everyone, held)
    same_rows_as = [r for r in range(W)
                    if all(torch.equal(held[n], everyone[r][n]) for n in held)]
    found_here = {
        "coordinate": coordinate,
        "placements": {n: [repr(x) for x in p.placements] for n, p in model.named_parameters()},
        "chunk": all(torch.equal(held[n], torch.chunk(whole[n], 2)[coordinate[1]])
                     for n in held),
        "same_rows_as": same_rows_as,
        "local_rows": list(held["blocks.0.linear.weight"].shape),
    }
    x, y = make_batches(3, 12)
    opt = torch.optim.AdamW(trainable(model), lr=1e-2)
    ddp = DDP(make_model())
    ddp_opt = torch.optim.AdamW(trainable(ddp), lr=1e-2)
    for s in range(3):
        step(model, opt, x, y, s)
        step(ddp, ddp_opt, x, y, s)
    flat = torch.cat([p.full_tensor().flatten() for p in model.parameters()])
    gathered = [torch.zeros_like(flat) for _ in range(W)]
    dist.all_gather(gathered, flat)
    before = torch.cat([p.flatten() for p in whole.values()])
    ddp_flat = torch.cat([p.detach().flatten() for p in ddp.module.parameters()])
    found_here.update({
        "equal_everywhere": all(torch.equal(gathered[0], g) for g in gathered),
        "moved": (flat - before).abs().max().item(),
        "from_ddp": (flat - ddp_flat).abs().max().item(),
    })
    keep("hsdp", found_here)


def checkpointed():
    # FSDP2 with each block's call inside torch.utils.checkpoint against FSDP2 without: 3
    # steps of AdamW, each rank its rows of 12; the blocks' forwards in each backward.
    from torch.utils.checkpoint import checkpoint

    models = [sharded(), sharded()]
    calls = [0]
    for block in models[1].blocks:
        block.register_forward_pre_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))

    def forward(x, model=models[1]):
        h = model.embed(x) + model.shift
        for block in model.blocks:
            h = checkpoint(block, h, use_reentrant=False)
        return model.head(h)

    models[1].forward = forward  # the root's hooks still run: model(x) is still called
    opts = [torch.optim.AdamW(trainable(m), lr=1e-2) for m in models]
    x, y = make_batches(3, 12)
    same, again = [], []
    for s in range(3):
        a = step(models[0], opts[0], x, y, s)
        before = calls[0]
        b = step(models[1], opts[1], x, y, s)
        again.append(calls[0] - before - len(models[1].blocks))  # beyond the forward's own
        same.append(a.item() == b.item() and all(
            torch.equal(p.to_local(), q.to_local())
            for p, q in zip(models[0].parameters(), models[1].parameters())))
    keep("checkpointed", {"same": same, "again": again})


FACTS = {2: [shards, training, stale_optimizer, gathers, forward_past_hooks, state_dicts,
             checkpoint_save, zero, ddp_bytes, mixed_precision, gloo_reduce_scatter,
             checkpointed],
         3: [shards, training, gathers, checkpoint_load, zero, gloo_reduce_scatter],
         4: [hsdp]}
for fact in FACTS[W]:
    try:  # a fact another torch cannot show (a function it lacks, on every rank alike)
        fact()  # leaves the others: its test fails with what it raised
    except Exception as exc:
        keep(f"{fact.__name__} raised", f"{type(exc).__name__}: {exc}")
dist.destroy_process_group()
sys.stdout.flush()
os._exit(0)  # the gloo exit quirk (COURSE.md): a clean group, then no exit-time abort
"""
)


def _job(folder, name: str, nprocs: int) -> dict:
    """Runs JOB on `nprocs` plain ranks: {"outcome": ..., "ranks": [what each found]}."""
    script, out = folder / "sharding_job.py", folder / name
    script.write_text(JOB)
    saved = folder / "two"
    outcome = plain_job(script, nprocs=nprocs, limit=90, args=(str(out), str(ROOT), str(saved)))
    ranks = []
    for rank in range(nprocs):
        written = out.with_name(f"{name}.{rank}")
        ranks.append(json.loads(written.read_text()) if written.exists() else {})
    return {"outcome": outcome, "ranks": ranks, "out": out}


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    return _job(tmp_path_factory.mktemp("sharding"), "two", 2)


@pytest.fixture(scope="module")
def three(two):
    return _job(two["out"].parent, "three", 3)


@pytest.fixture(scope="module")
def four(tmp_path_factory):
    return _job(tmp_path_factory.mktemp("sharding"), "four", 4)


def _fact(job: dict, name: str) -> list:
    """Each rank's finding `name`; a missing one fails with the job's outcome."""
    found = [rank.get(name) for rank in job["ranks"]]
    raised = sorted({r[f"{name} raised"] for r in job["ranks"] if f"{name} raised" in r})
    assert not raised, f"{name}: raised {'; '.join(raised)}"
    assert all(f is not None for f in found), f"{name}: not found; the job: {job['outcome']}"
    return found


# The lesson's model, as the facts below count it.
SHAPES = {
    "embed.weight": (16, 8),
    "embed.bias": (16,),
    **{
        f"blocks.{i}.linear.{k}": s
        for i in range(3)
        for k, s in (("weight", (16, 16)), ("bias", (16,)))
    },
    "head.weight": (2, 16),
    "head.bias": (2,),
}
ROOT_OWN = ["embed.weight", "embed.bias", "head.weight", "head.bias"]


def _numel(shape) -> int:
    return math.prod(shape)


def _padded(shape, world: int) -> int:
    """Elements of one rank's dim-0 shard, padded to ceil(rows / world) rows as FSDP2 pads
    it for its collectives."""
    return math.ceil(shape[0] / world) * _numel(shape[1:])


@pytest.mark.parametrize("world", [2, 3])
def test_fully_shard_makes_every_parameter_a_dim0_dtensor_shard_as_torch_chunk_cuts(request, world):
    # lesson 05: fully_shard on each block then the root, on init_device_mesh("cpu", (W,)):
    # every parameter is a DTensor placed Shard(0), its local tensor the rank's torch.chunk
    # piece along dim 0 (uneven on 3 ranks: 16 rows are 6, 6, 4; head's 2 rows are 1, 1, 0:
    # rank 2 holds nothing of the head); the frozen bias stays frozen, the buffer stays a
    # plain tensor, the same on every rank.
    job = request.getfixturevalue("two" if world == 2 else "three")
    for rank, found in enumerate(_fact(job, "shards")):
        params = found["params"]
        assert set(params) == set(SHAPES)
        for name, seen in params.items():
            assert seen["type"] == "DTensor" and seen["placements"] == ["Shard(dim=0)"], name
            assert seen["global"] == list(SHAPES[name]) and seen["chunk"], (name, seen)
            assert seen["requires_grad"] is (name != "head.bias"), name
        rows = {2: [8, 8], 3: [6, 6, 4]}[world][rank]
        assert params["blocks.0.linear.weight"]["local"] == [rows, 16]
        assert params["head.weight"]["local"] == [{2: [1, 1], 3: [1, 1, 0]}[world][rank], 16]
        assert found["buffers"] == {"shift": "Tensor"} and found["shift_same"]


@pytest.mark.parametrize("world", [2, 3])
def test_fsdp2_trains_as_ddp_bit_for_bit_on_2_ranks_and_to_the_last_bits_on_3(request, world):
    # lesson 05: FSDP2 (each block then the root) against DDP, AdamW(lr=1e-2), the same
    # weights, 5 steps, each rank its rows of 12, a mean loss. On 2 ranks the losses and
    # the parameters are equal bit for bit, float32 and float64. On 3 ranks they part in
    # the last bits from step 1's update: FSDP2 averages with a reduce-scatter whose op is
    # ReduceOp.AVG (its float32 path, _fsdp_collectives.py), DDP multiplies each gradient
    # by 1/3 and all-reduces its bucket: three floats added in another order, or scaled at
    # another point, round differently (two add alike either way, and halving is exact).
    # Measured: loss 1.2e-7, parameters 3.0e-8 (float32); 2.2e-16, 1.1e-16 (float64).
    # The lesson can promise 1e-6 in float32 over these 5 steps.
    job = request.getfixturevalue("two" if world == 2 else "three")
    for found in _fact(job, "training"):
        f32, f64 = found["torch.float32"], found["torch.float64"]
        if world == 2:
            assert f32["same"] == f64["same"] == [True] * 5, found
            assert f32["loss"] == f32["param"] == f64["loss"] == f64["param"] == 0.0
        else:
            assert f32["same"] == f64["same"] == [False] * 5, found  # from the first update
            assert 0.0 < f32["param"] < 1e-6 and f32["loss"] < 1e-6, f32
            assert 0.0 < f64["param"] < 1e-14 and f64["loss"] < 1e-14, f64


@pytest.mark.parametrize("world", [2, 3])
def test_fsdp2_reduce_scatters_ask_for_reduce_op_avg_in_float32_on_gloo_and_sum_in_float64(
    request, world
):
    # lesson 05 (why FSDP2 matches DDP bit for bit on 2 ranks, not on 3): over the 5 steps
    # of the training fact above, every one of FSDP2's 20 reduce-scatters (4 a step: each
    # block, then the root) calls dist.reduce_scatter_single with op=ReduceOp.AVG in
    # float32, on gloo as on nccl (_fsdp_collectives.py, _get_gradient_divide_factors:
    # float32 and bfloat16 take the backend's average); in float64 with ReduceOp.SUM (the
    # "overflow risk" path: FSDP2 divides the sum by the world size itself afterwards).
    # Gloo averages by summing and dividing by the group's size (ProcessGroupGlooDetail.hpp:
    # "Gloo doesn't support AVG so we use SUM + division"): on 2 ranks (a + b) / 2 equals
    # DDP's a/2 + b/2 exactly (halving is exact), on 3 (a + b + c) / 3 need not equal
    # a/3 + b/3 + c/3.
    job = request.getfixturevalue("two" if world == 2 else "three")
    for found in _fact(job, "training"):
        f32, f64 = found["torch.float32"], found["torch.float64"]
        assert f32["reduce_scatters"] == f64["reduce_scatters"] == 20, found
        assert f32["reduce_ops"] == ["AVG"], f32
        assert f64["reduce_ops"] == ["SUM"], f64


def test_an_optimizer_built_before_fully_shard_steps_nothing_and_says_nothing(two):
    # lesson 05 (the mistake "the optimizer built before sharding"): fully_shard replaces
    # every parameter with a new DTensor one; an AdamW made before holds the old plain
    # Parameters, which get no gradient: its step() raises nothing, keeps no state, and
    # leaves the model's parameters as they were, step after step.
    for found in _fact(two, "stale_optimizer"):
        assert found == {
            "holds_a_model_parameter": False,
            "holds": ["Parameter"],
            "steps": ["ran", "ran"],
            "unchanged": True,
            "state": 0,
            "model_has_grads": True,
        }


@pytest.mark.parametrize("world", [2, 3])
def test_per_block_sharding_all_gathers_each_block_the_root_alone_gathers_everything_once(
    request, world
):
    # lesson 05 (the mistake "only the root sharded"): FSDP2 in 2.13 calls
    # dist.all_gather_single and dist.reduce_scatter_single. Sharded per block then the
    # root, one forward and backward: 4 all-gathers in forward (the root's own parameters,
    # embed and head, then each block's), 3 in backward (each block again: reshard after
    # forward; the root's not: the root keeps its parameters unsharded after forward),
    # 4 reduce-scatters (each block, then the root's, without the frozen bias). The root
    # alone: one all-gather of every parameter before the forward, none in backward, one
    # reduce-scatter. Each rank sends its shard padded to ceil(rows / W) rows.
    job = request.getfixturevalue("two" if world == 2 else "three")
    block = sum(_padded(SHAPES[f"blocks.0.linear.{k}"], world) for k in ("weight", "bias"))
    own = sum(_padded(SHAPES[n], world) for n in ROOT_OWN)
    own_grads = own - _padded(SHAPES["head.bias"], world)
    every = own + 3 * block

    def calls(kind, elements):
        return (
            [[kind, 4 * elements, 4 * elements * world]]
            if kind == "all_gather"
            else [[kind, 4 * elements * world, 4 * elements]]
        )

    for found in _fact(job, "gathers"):
        per_block = [c[:4] for c in found["blocks"]["calls"]]
        forward = [c[1:] for c in per_block if c[0] == "forward"]
        backward = [c[1:] for c in per_block if c[0] == "backward"]
        assert forward == calls("all_gather", own) + 3 * calls("all_gather", block)
        assert [c for c in backward if c[0] == "all_gather"] == 3 * calls("all_gather", block)
        assert [c for c in backward if c[0] == "reduce_scatter"] == (
            3 * calls("reduce_scatter", block) + calls("reduce_scatter", own_grads)
        )
        root = [c[:4] for c in found["root"]["calls"]]
        assert root == [
            ["forward", *calls("all_gather", every)[0]],
            ["backward", *calls("reduce_scatter", every - _padded(SHAPES["head.bias"], world))[0]],
        ]
        after = found["blocks"]["sharded_after_forward"]
        assert {n for n, is_sharded in after.items() if not is_sharded} == set(ROOT_OWN)
        assert not any(found["root"]["sharded_after_forward"].values())
    # The figures, per rank: 3 ranks pad 16 rows to 18 (6 each): a block sends 408 bytes
    # and receives 1224; the root alone 1508 and 4524 (the model: 994 parameters, 3976 B).
    if world == 3:
        assert block * 4 == 408 and every * 4 == 1508
    else:
        assert block * 4 == 544 and every * 4 * 2 == 3976


def test_the_pinned_torch_has_neither_the_mpi_nor_the_ucc_backend():
    # lesson 05 (why a reduce-scatter run as a ring is not measured): the backends that
    # could run one on the CPU, MPI and UCC, are not built into the torch this course pins
    # (nccl needs GPUs); gloo is its CPU backend, and it has no reduce-scatter of its own
    # (the test below).
    import torch.distributed as dist

    assert dist.is_gloo_available()
    assert not dist.is_mpi_available() and not dist.is_ucc_available()


@pytest.mark.parametrize("world", [2, 3])
def test_gloo_runs_every_reduce_scatter_as_an_all_reduce_of_the_whole_tensor(request, world):
    # lesson 05 (what torch 2.13 really sends on gloo): gloo has no reduce-scatter of its
    # own. What the backend ran, read from torch.profiler's events named "gloo:...":
    # dist.reduce_scatter_single of W x 5 elements (SUM or AVG), and its deprecated alias
    # reduce_scatter_tensor, run one gloo:all_reduce of all W x 5 elements, each rank
    # then keeping its 5; the list form dist.reduce_scatter runs W all-reduces, one per
    # rank's 5 (every rank receives every part either way). In one FSDP2 training step
    # (forward, backward, AdamW), each reduce-scatter FSDP2 calls shows up as a
    # gloo:all_reduce of its whole input: every gradient of the group, padded to W x
    # ceil(rows / W) rows (3 ranks: a block's 272 elements travel as 306); the all-gathers
    # stay gloo:all_gather, of the rank's shard. No event is named gloo:reduce_scatter.
    # Measured, float32 elements all-reduced per step: 2 ranks 272, 272, 272, 176 (3968
    # bytes: DDP's one bucket), 3 ranks 306, 306, 306, 210 (4512 bytes).
    job = request.getfixturevalue("two" if world == 2 else "three")
    block = sum(_padded(SHAPES[f"blocks.0.linear.{k}"], world) for k in ("weight", "bias"))
    own_grads = sum(_padded(SHAPES[n], world) for n in ROOT_OWN if n != "head.bias")
    for found in _fact(job, "gloo_reduce_scatter"):
        direct = found["direct"]
        for name in (
            "reduce_scatter_single SUM",
            "reduce_scatter_single AVG",
            "reduce_scatter_tensor",
        ):
            assert direct[name]["gloo"] == [["gloo:all_reduce", 5 * world, "float"]], name
            assert direct[name]["mine"], name
        assert direct["reduce_scatter (list)"] == {
            "gloo": [["gloo:all_reduce", 5, "float"]] * world,
            "mine": True,
        }
        calls, ran = found["fsdp_calls"], found["fsdp_gloo"]
        as_gloo = {"all_gather": "gloo:all_gather", "reduce_scatter": "gloo:all_reduce"}
        # each call as gloo ran it (sorted: two gloo threads may start them out of order)
        assert sorted(ran) == sorted([as_gloo[kind], n_in, "float"] for kind, n_in, _ in calls)
        scattered = [[n_in, n_out] for kind, n_in, n_out in calls if kind == "reduce_scatter"]
        assert sorted(scattered) == sorted(
            [[world * block, block]] * 3 + [[world * own_grads, own_grads]]
        )
        assert not any("reduce_scatter" in name for name, _, _ in ran)
        all_reduced = sorted(n for name, n, _ in ran if name == "gloo:all_reduce")
        assert 4 * sum(all_reduced) == {2: 3968, 3: 4512}[world], all_reduced


def test_reduce_scatter_tensor_is_a_deprecated_alias_of_reduce_scatter_single(two):
    # lesson 05 (the name to write): in torch 2.13 dist.reduce_scatter_tensor warns that
    # it is deprecated (a FutureWarning) and calls
    # reduce_scatter_single, the name FSDP2 itself calls (distributed_c10d.py).
    for found in _fact(two, "gloo_reduce_scatter"):
        assert found["direct"]["reduce_scatter_tensor"]["warned"] == [
            "FutureWarning: `torch.distributed.reduce_scatter_tensor` is deprecated. "
            "Please use `torch.distributed.reduce_scatter_single` instead."
        ]


def test_model_forward_past_the_hooks_raises_mixed_tensor_and_dtensor(two):
    # lesson 05 (the mistake "model.forward called past the hooks"): forward() skips
    # FSDP2's pre-forward hook, so nothing all-gathers: the first layer meets its sharded
    # DTensor weight with a plain input and raises, on a fresh model and after a step.
    message = (
        "RuntimeError: aten.addmm.default got mixed torch.Tensor and DTensor, need to "
        "convert all torch.Tensor to DTensor before calling distributed operators!"
    )
    for found in _fact(two, "forward_past_hooks"):
        assert found == {"fresh": message, "after_a_step": message}


def test_the_state_dict_holds_dtensors_torch_save_on_rank_0_keeps_rank_0s_rows(two, request):
    # lesson 05 (the mistakes "a sharded state dict read as whole", "torch.save of sharded
    # state on rank 0"): model.state_dict() holds DTensors (their .shape the whole
    # parameter's, their local tensor the rank's rows) and the buffer as a plain tensor.
    # get_model_state_dict(full_state_dict=True, cpu_offload=True) gives rank 0 whole
    # plain tensors, and the other ranks {}. torch.save of model.state_dict() on rank 0
    # writes DTensors holding rank 0's rows only. Read by a process without the group (the
    # 3-rank job's rank 0, before its init_process_group): torch.load (weights_only)
    # refuses it until torch.distributed.tensor is imported; then DTensors whose shape
    # looks whole, holding 8 of 16 rows, which neither full_tensor() nor a plain model's
    # load_state_dict takes.
    ranks = _fact(two, "state_dicts")
    for found in ranks:
        seen = found["state_dict"]
        assert seen["shift"] == {"type": "Tensor", "global": [16], "local": None}
        for name, shape in SHAPES.items():
            rows = math.ceil(shape[0] / 2)
            assert seen[name] == {
                "type": "DTensor",
                "global": list(shape),
                "local": [rows, *shape[1:]],
            }, name
    full = ranks[0]["full"]
    assert set(full) == {*SHAPES, "shift"} and ranks[0]["full_equal"]
    assert {(v["type"], v["device"]) for v in full.values()} == {("Tensor", "cpu")}
    assert ranks[1]["full"] == {} and ranks[1]["full_equal"] is False
    three = request.getfixturevalue("three")
    plain = three["ranks"][0].get("plain_load")  # rank 0 alone reads it
    assert plain is not None, f"plain_load: not found; the job: {three['outcome']}"
    assert plain["torch.load"].startswith("UnpicklingError: Weights only load failed.")
    assert "``torch.distributed.tensor`` must be imported to load DTensors" in plain["torch.load"]
    assert plain["embed.weight"] == ["DTensor", [16, 8], [8, 8]] and plain["rows"]
    assert plain["full_tensor"].startswith(
        "RuntimeError: Could not resolve the process group registered under the name"
    )
    assert plain["load_state_dict"].startswith("RuntimeError: Error(s) in loading state_dict")
    assert "got mixed torch.Tensor and DTensor" in plain["load_state_dict"]


def test_dcp_saves_one_file_per_rank_and_loads_on_3_ranks_what_2_saved(two, three):
    # lesson 05: dcp.save of get_state_dict(model, optimizer) (DTensors: parameters and
    # AdamW's exp_avg, exp_avg_sq; step a plain tensor) on 2 ranks writes .metadata and one
    # file per rank, __0_0.distcp and __1_0.distcp. On 3 ranks, a freshly sharded model and
    # a fresh AdamW, get_state_dict, dcp.load, set_state_dict: the whole parameters and
    # AdamW's state equal the saved ones (they did not before), each rank holding its new
    # rows (rank 2: 4 of embed's 16).
    saved = _fact(two, "checkpoint_save")
    assert saved[0]["files"] == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    assert {s["exp_avg_type"] for s in saved} == {"DTensor"}
    loaded = _fact(three, "checkpoint_load")
    for rank, found in enumerate(loaded):
        assert found["before"] == {"params": False, "adam": False}, found
        assert found["after"] == {"params": True, "adam": True}, found
        assert found["adam_keys"] == ["exp_avg", "exp_avg_sq", "step"]
        assert found["adam_step"] == 3.0
        assert found["local_exp_avg"] == [[6, 8], [6, 8], [4, 8]][rank]


def test_dcp_save_is_a_collective_rank_0_alone_waits_until_the_others_call_it(two):
    # lesson 05 (why every rank calls dcp.save): called on rank 0 alone it has not finished
    # after 3 s, nor written a file; once rank 1 calls it too, both finish and the
    # checkpoint is written.
    rank0 = _fact(two, "checkpoint_save")[0]
    assert rank0["rank0_alone"]["finished"] is False
    assert not any(f.endswith(".distcp") for f in rank0["rank0_alone"]["files"])
    assert rank0["then_joined"] == {
        "finished": True,
        "files": [".metadata", "__0_0.distcp", "__1_0.distcp"],
    }


def _greedy(world: int) -> list[list[str]]:
    """ZeroRedundancyOptimizer's partition as 2.13 makes it: parameters by size, largest
    first (ties in order), each to the rank holding the fewest elements so far (ties: the
    lower rank); the frozen bias counted like any other."""
    order = sorted(SHAPES, key=lambda n: -_numel(SHAPES[n]))
    ranks, sizes = [[] for _ in range(world)], [0] * world
    for name in order:
        least = sizes.index(min(sizes))
        ranks[least].append(name)
        sizes[least] += _numel(SHAPES[name])
    return ranks


@pytest.mark.parametrize("world", [2, 3])
def test_zero_redundancy_optimizer_matches_adamw_bit_for_bit_and_keeps_its_partition(
    request, world
):
    # lesson 05: ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=AdamW) after 3
    # steps: parameters equal DDP + plain AdamW bit for bit (2 and 3 ranks). Each rank's
    # AdamW holds its partition (greedy by size: the largest parameters first, each to the
    # least-loaded rank) and state only for it: 1024 + 960 elements on 2 ranks, 768 + 608
    # + 608 on 3, together plain AdamW's 1984 (2 x 992 trainable; the frozen bias is in a
    # partition but has no state).
    job = request.getfixturevalue("two" if world == 2 else "three")
    expected = _greedy(world)
    for rank, found in enumerate(_fact(job, "zero")):
        assert found["equal"] is True
        assert found["mine"] == expected[rank]
        assert found["with_state"] == sorted(set(expected[rank]) - {"head.bias"})
        assert found["elements"] == 2 * sum(_numel(SHAPES[n]) for n in found["with_state"])
        assert found["plain_elements"] == 1984
    counts = [f["elements"] for f in _fact(job, "zero")]
    assert counts == {2: [1024, 960], 3: [768, 608, 608]}[world]


def test_ddp_all_reduces_the_trainable_gradients_once_and_adam_keeps_two_moments(two):
    # lesson 05: DDP's all-reduce per step carries each trainable gradient once (its
    # buckets, seen by a hook that records each and averages it as DDP does): 3968
    # bytes in float32 (992 of the 994 parameters: not the frozen bias), in one bucket (the
    # model is under 1 MiB), step 1 and 2. AdamW's state per parameter: exp_avg and
    # exp_avg_sq of its shape and dtype, and a 0-d float32 step: float32 parameters +
    # gradients + moments = 16 bytes per parameter. With model.to(torch.bfloat16): the
    # gradients, exp_avg and exp_avg_sq are bfloat16 (8 bytes per parameter, the buckets
    # 1984 bytes), the step still float32. The frozen bias has no state.
    for found in _fact(two, "ddp_bytes"):
        f32, b16 = found["torch.float32"], found["torch.bfloat16"]
        for got, dtype, size in ((f32, "torch.float32", 4), (b16, "torch.bfloat16", 2)):
            assert got["parameters"] == 994 and got["trainable"] == 992
            assert got["buckets"] == [[[992 * size, dtype]]] * 2
            assert got["param_bytes"] == got["grad_bytes"] == 992 * size
            assert got["adam_bytes"] == 2 * 992 * size
            assert got["grad_dtypes"] == [dtype]
            assert got["state"] == {
                "step": ["torch.float32", []],
                "exp_avg": [dtype, [16, 8]],
                "exp_avg_sq": [dtype, [16, 8]],
            }
            assert got["state_of_frozen"] is False
        per_parameter = (f32["param_bytes"] + f32["grad_bytes"] + f32["adam_bytes"]) / 992
        assert per_parameter == 16.0
        assert (b16["param_bytes"] + b16["grad_bytes"] + b16["adam_bytes"]) / 992 == 8.0


def test_mixed_precision_computes_in_bfloat16_and_keeps_float32_shards_and_grads(two):
    # lesson 05: MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32) runs on
    # the CPU with gloo: the sharded parameters stay float32 DTensors, every layer's forward
    # sees bfloat16 weights (the all-gathers carry bfloat16), the output is bfloat16, the
    # reduce-scatters are float32 and the sharded gradients float32 DTensors.
    for found in _fact(two, "mixed_precision"):
        assert found == {
            "inside": [
                ["embed", "torch.bfloat16"],
                ["blocks.1.linear", "torch.bfloat16"],
                ["head", "torch.bfloat16"],
            ],
            "output": "torch.bfloat16",
            "sharded": ["DTensor torch.float32"],
            "grads": ["DTensor torch.float32"],
            "collectives": ["all_gather torch.bfloat16", "reduce_scatter torch.float32"],
        }


def test_hsdp_on_a_2x2_mesh_replicates_along_one_dim_and_shards_along_the_other(four):
    # lesson 05 (HSDP): fully_shard (each block, then the root) on
    # init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard")), 4 ranks:
    # rank r sits at (r // 2, r % 2); every parameter is placed (Replicate(), Shard(dim=0)),
    # its local tensor torch.chunk's piece for the rank's shard coordinate (8 of a block's
    # 16 rows): ranks 0 and 2 hold the same rows, and 1 and 3; ranks 0 and 1 different
    # ones. After 3 AdamW steps (each rank its 3 rows of 12) every rank's full parameters
    # are equal, and moved.
    for rank, found in enumerate(_fact(four, "hsdp")):
        assert found["coordinate"] == [rank // 2, rank % 2]
        assert found["placements"] == {n: ["Replicate()", "Shard(dim=0)"] for n in SHAPES}
        assert found["chunk"] and found["local_rows"] == [8, 16]
        assert found["same_rows_as"] == [[0, 2], [1, 3]][rank % 2]
        assert found["equal_everywhere"] is True and found["moved"] > 1e-3, found


def test_hsdp_trains_as_ddp_on_4_ranks_to_the_last_bits(four):
    # lesson 05 (HSDP): the same 3 steps with DDP on the 4 ranks: HSDP's parameters are
    # within 1e-6 of DDP's (measured 3.0e-8 in float32; not bit for bit: FSDP2 averages
    # over the shard group, then over the replicate group (_fsdp_collectives.py), DDP
    # all-reduces 4 quarters).
    for found in _fact(four, "hsdp"):
        assert found["from_ddp"] < 1e-6, found


def test_a_checkpointed_block_under_fsdp2_trains_as_without_and_runs_its_forward_again(two):
    # lesson 05 (activation checkpointing): FSDP2 (each block, then the root) with each
    # block's call inside torch.utils.checkpoint(use_reentrant=False), against the same
    # without, AdamW, 3 steps on 2 ranks: the losses and every local shard equal bit for
    # bit at each step; each backward runs every block's forward once more.
    for found in _fact(two, "checkpointed"):
        assert found == {"same": [True] * 3, "again": [3] * 3}, found


def _saved_by_a_block(checkpointed: bool) -> tuple[list, int]:
    """One block of lesson 05's model, 64 rows of 16: the shapes of the tensors autograd
    saves for the backward that are not parameters (seen by saved_tensors_hooks, outside any
    checkpoint), and the block's forwards during the backward."""
    import torch
    from torch.utils.checkpoint import checkpoint

    from ddp_helpers.exercises.lesson05.common import make_model

    block = make_model().blocks[0]
    params = {p.data_ptr() for p in block.parameters()}
    saved, calls = [], [0]
    block.register_forward_pre_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))

    def pack(t):
        if t.data_ptr() not in params:
            saved.append(tuple(t.shape))
        return t

    h = torch.randn(64, 16, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = checkpoint(block, h, use_reentrant=False) if checkpointed else block(h)
    out.sum().backward()
    return saved, calls[0] - 1


def test_a_block_keeps_two_activations_and_checkpointed_none_but_runs_its_forward_again():
    # lesson 05 (activation checkpointing): the block x + tanh(linear(x)) saves two
    # tensors of its rows for the backward besides its weight: the linear layer's input
    # (for the weight's gradient) and tanh's output (for tanh's). Inside
    # checkpoint(use_reentrant=False), one: its input; and the backward runs its forward
    # once more.
    assert _saved_by_a_block(False) == ([(64, 16), (64, 16)], 0)
    assert _saved_by_a_block(True) == ([(64, 16)], 1)


def test_checkpointing_each_block_halves_what_the_forward_holds_with_equal_gradients():
    # lesson 05 (activation checkpointing): demos/activations.py's measurement, in this
    # process: what the forward allocates and still holds at its end, lesson 05's model
    # 256 wide and 8 blocks deep on 128 rows: checkpointed, each block holds its input
    # alone, one activation of 128 x 256 floats (128 KiB) less per block (8 x 128 KiB, give
    # or take 40 KiB of the profiler's count measured at 128 and 512 rows): about half (55%
    # measured); gradients equal bit for bit; a third more matrix-product work (4/3).
    from ddp_helpers.demos.activations import activation_memory

    m = activation_memory(rows=(128,))["by_rows"][128]
    per_block = 128 * 256 * 4
    assert abs((m["plain"] - m["checkpointed"]) - 8 * per_block) < per_block / 2, m
    assert 0.45 < m["checkpointed"] / m["plain"] < 0.6, m
    assert m["diff"] == 0.0 and m["again"] == 8, m
    assert abs(m["flops"][1] / m["flops"][0] - 4 / 3) < 0.02, m


DCP_SLOW_RANK = """
import os, sys, time
from pathlib import Path
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemWriter
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard


class SlowWriter(FileSystemWriter):
    def write_data(self, plan, planner):
        time.sleep(2.0)  # rank 1 writes its shards 2 s late
        return super().write_data(plan, planner)


dist.init_process_group("gloo")
rank, path = dist.get_rank(), Path(sys.argv[1])
model = fully_shard(torch.nn.Linear(8, 8), mesh=init_device_mesh("cpu", (2,)))
writer = SlowWriter(path) if rank == 1 else FileSystemWriter(path)
dcp.save({"model": model.state_dict()}, storage_writer=writer)
written = sorted(p.name for p in path.iterdir() if p.stat().st_size > 0)
if written != [".metadata", "__0_0.distcp", "__1_0.distcp"]:
    sys.exit(f"rank {rank} returned with {written}")
dist.barrier()
dist.destroy_process_group()
"""


def test_dcp_save_returns_on_every_rank_once_every_ranks_file_and_the_metadata_are_written(
    tmp_path,
):
    # lesson 05 (05-50: the script renames a snapshot's folder once dcp.save returned on rank
    # 0): with rank 1's writes held back 2 s, dcp.save returns on neither rank before rank 1's
    # file and the .metadata file are in the folder.
    script = tmp_path / "slow.py"
    script.write_text(DCP_SLOW_RANK)
    assert plain_job(script, args=(str(tmp_path / "snapshot"),)) == "clean"
