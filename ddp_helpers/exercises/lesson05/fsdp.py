"""5.2 train_fsdp: FSDP2 on a DeviceMesh, each block then the root, the optimizer after.

The check runs the answer on 2 and 3 ranks (uneven shards) and trains DDP beside it, from
the same weights on the same rows with the same optimizer: FSDP2 must give its losses and
weights to within TOLERANCE (why not bit for bit: TOLERANCE's comment)."""

from __future__ import annotations

import json
import random

from ...i18n import messages
from ...launcher.plain import shown, to_plain
from ..kit import (
    Exercise,
    Mistake,
    Phrase,
    Wrong,
    and_list,
    process_group,
    rank_mistakes,
    run_on_ranks,
)
from ..space import CHECK_SEED, Space, on_hidden_seeds, trying
from .common import DEPTH, WIDTH, make_batches, make_model, my_rows

MESSAGES = messages(
    "exercises.lesson05.fsdp",
    {
        "hint.fsdp_blocks": (
            "fully_shard each block of model.blocks first, in a loop over however many the "
            "model has, then the root model: each block then gathers its full weights just "
            "before its own forward pass and frees them after it, and the root keeps what no "
            "block holds (embed, head) in shards too."
        ),
        "hint.fsdp_mesh": (
            "Give every fully_shard call the mesh you are given (mesh=mesh): the caller "
            "decides which ranks share the shards. A mesh of your own, or no mesh= at all "
            "(fully_shard then makes one of every rank), ignores it."
        ),
        "hint.fsdp_optimizer": (
            "fully_shard replaces each parameter by a DTensor that holds this rank's shard. "
            "Make the optimizer after sharding, make_optimizer(model.parameters()), so that it "
            "holds and steps those shards."
        ),
        "hint.fsdp_hooks": (
            "Call model(x), never model.forward(x): the all-gather that brings the full "
            "weights back before a forward pass, and the reduce-scatter after the backward "
            "pass, run in hooks that only model(x) calls."
        ),
        "hint.fsdp_loop": (
            "For each (x, y): loss = mse_loss(model(x), y); zero the gradients, backward(), "
            "step; keep loss.item(), a float, in the list you return."
        ),
        "hint.fsdp_code": (
            "for block in model.blocks: fully_shard(block, mesh=mesh); then fully_shard(model, "
            "mesh=mesh); optimizer = make_optimizer(model.parameters()); then for x, y in "
            "batches: loss = F.mse_loss(model(x), y); optimizer.zero_grad(); loss.backward(); "
            "optimizer.step(); losses.append(loss.item()); return losses."
        ),
        "fsdp_forward": (
            "model.forward(x) was called, past the hooks that model(x) runs: the all-gather "
            "of the root's own parameters (embed, head) never ran, so its layers met this "
            "rank's shards (DTensors) where the full weights belong{what}."
        ),
        "fsdp_forward_raised": ", and torch refused them ({error})",
        "fsdp_forward.title": "model.forward called past FSDP's hooks",
        "fsdp_mesh": (
            "{how}: use the mesh train_fsdp is given, in every fully_shard call (mesh=mesh)."
        ),
        "fsdp_mesh_made": (
            "Rank {rank} made a DeviceMesh of its own, of shape {shape} ({count} in all)"
        ),
        "fsdp_mesh_other": (
            "The parameter '{name}' is sharded on another mesh than the one train_fsdp is given"
        ),
        "fsdp_mesh.title": "the mesh given ignored",
        "fsdp_none": (
            "Neither the model nor any block is an FSDPModule: nothing was sharded, so each "
            "rank trained its own whole copy, never averaged with the others."
        ),
        "fsdp_none.title": "nothing sharded",
        "fsdp_root_only": (
            "Only the root is an FSDPModule, none of the {depth} blocks: all the weights form "
            "one group, gathered whole before the forward pass and freed only after it. "
            "Measured: during the forward pass each rank held the full weights of {held} "
            "blocks at once, where sharding each block holds {per_block}."
        ),
        "fsdp_root_only.title": "only the root sharded, nothing freed between blocks",
        "fsdp_blocks_only": (
            "The blocks are FSDPModules but the root model is not: {names} stayed whole, plain "
            "tensors on every rank that nothing averages, so each rank trained them on its "
            "own rows and they drift apart (on rank {rank} they differ from DDP's by up to "
            "{diff:.2e})."
        ),
        "fsdp_blocks_only.title": "the blocks sharded, not the root",
        "fsdp_blocks_missed": (
            "{which} (of the {depth} in model.blocks): shard every block the model has, in a "
            "loop over model.blocks, not a count of your own."
        ),
        "fsdp_missed_one": "Block {blocks} is not an FSDPModule",
        "fsdp_missed_many": "Blocks {blocks} are not FSDPModules",
        "fsdp_blocks_missed.title": "not every block sharded (a depth of its own)",
        "fsdp_no_optimizer": (
            "make_optimizer was never called: make the optimizer with it, after sharding, "
            "as make_optimizer(model.parameters())."
        ),
        "fsdp_no_optimizer.title": "make_optimizer not used",
        "fsdp_optimizer_before": (
            "Of the {total} parameters the optimizer that stepped holds, {count} are not the "
            "model's after fully_shard: {what}. They get no gradient, so its steps changed "
            "nothing in the model."
        ),
        "fsdp_optimizer_plain": (
            "whole plain tensors, as the model's were before fully_shard replaced them by "
            "DTensor shards (and the optimizer keeps those whole copies in memory)"
        ),
        "fsdp_optimizer_other": "parameters of another model, not of the one it was given",
        "fsdp_optimizer_before.title": "the optimizer made before sharding",
        "fsdp_return": (
            "train_fsdp returned {got}: return the list of the {steps} losses, one float per "
            "batch (loss.item())."
        ),
        "fsdp_return.title": "not a list of the losses as floats",
        "fsdp_losses": (
            "On rank {rank}, the loss of step {step} is {got:.6g}; DDP from the same weights, "
            "on the same rows with the same optimizer, has {want:.6g}."
        ),
        "fsdp_losses.title": "other losses than DDP's",
        "fsdp_weights": (
            "The losses are DDP's, but after training the parameter '{name}' (gathered whole) "
            "differs from DDP's by up to {diff:.2e}."
        ),
        "fsdp_weights.title": "other weights than DDP's after training",
        "tried_model": "a model of {v}",
        "fsdp_model": "{depth} blocks {width} wide",
        "fsdp_ok": (
            "Every block and the root are FSDPModules on the mesh given, the optimizer holds "
            "the sharded DTensor parameters, and the losses and weights are DDP's to within "
            "{tolerance} times the rounding of the dtype: on 2 and 3 ranks (uneven shards), "
            "in float32 and float64, twice in one process with other models."
        ),
    },
)


def train_fsdp(model, mesh, make_optimizer, batches):
    import torch
    from torch.distributed.fsdp import fully_shard

    for block in model.blocks:
        fully_shard(block, mesh=mesh)  # each block gathered just before use, freed after
    fully_shard(model, mesh=mesh)  # the root: embed and head, and the first all-gather
    optimizer = make_optimizer(model.parameters())  # after: the DTensor shards
    losses = []
    for x, y in batches:
        loss = torch.nn.functional.mse_loss(model(x), y)  # model(x): its hooks gather
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


# Why not bit for bit: DDP multiplies each rank's gradient by 1/world, then all-reduces (sums);
# FSDP2's reduce-scatter sums first and divides after (float32: ReduceOp.AVG; float64: / 2
# before and / 1.5 after, on 3 ranks), and the ranks' terms are added in another order. On 2
# ranks halving is exact and a + b = b + a, so the two agree bit for bit; on 3 they differ in
# the last bit of some gradients, which Adam carries on. tests/exercises/drawn/test_ex_5_2.py
# establishes each of these. Measured, in units of the dtype's eps relative to max(1, |DDP's
# value|), losses and weights: 2 ranks 0; 3 ranks at most 2 over 12 models x float32 and
# float64 x 3 steps with Adam and with SGD, and at most 1 on the check's own draws (the test
# holds them under 8). The check allows 64: a real mistake is off by far more (the least
# of the answers', gradients never zeroed, by over a hundred times that; the test holds it).
TOLERANCE = 64  # units of the dtype's eps, relative to max(1, |DDP's value|)
LR = 0.01  # the spy's Adam
# The blocks whose full weights a rank holds at once during the forward pass when each block
# is sharded: the one running, the one before it freed already (measured at each block's
# forward on the reference, tests/exercises/drawn/test_ex_5_2.py); the root alone holds all.
PER_BLOCK_HELD = 1
HANG = 20  # s: a launch takes 0.5-3 s here (2 cores), the first FSDP2 use in a rank included
RUN_TIME = 60.0  # s: the check and the grader's extra cases, 3 x 2 launches (1 + 2.3 s here)
WORLDS = (2, 3)
DEPTHS = (4, 5)  # more blocks than the notebook's 3: a depth of its own leaves some out
WIDTHS = (11, 13)  # shards uneven on 2 and 3 ranks; the head's 2 rows leave rank 2 none
ROWS = (3, 5)  # each rank's rows per batch
STEPS = (2, 3)  # the first call's, the second's
DTYPES = ("float32", "float64")
NOTEBOOK_ROWS = 4  # each rank's rows in the notebook's cells (8 rows on 2 ranks)
SPACE = Space(
    drawn={
        "world": WORLDS,
        "calls": (2,),
        "steps": STEPS,
        "counts": {"depth": DEPTHS, "width": WIDTHS, "rows": ROWS},
        "dtypes": DTYPES,
        "model": ("frozen", "buffer"),
    },
    why_not={
        "machines": "FSDP2 shards over the mesh it is given: which machine a rank is on is "
        "the mesh's business (HSDP, replicate across machines and shard within, is Going "
        "further), and the answer reads nothing of it",
        "lengths": "the answer is given batches, no lengths of its own: the rows per rank and "
        "the steps are counts (drawn)",
        "device": "the mesh carries the device (its device_type) and fully_shard reads it "
        "from there: the answer names no device (on the CPU the check runs on gloo)",
    },
    notebook={"depth": DEPTH, "width": WIDTH, "rows": NOTEBOOK_ROWS},
)


def _draws(seed: int) -> list[tuple[int, str, list[dict]]]:
    """(world, dtype, [the two calls' model and batches]) of each launch for this seed: the
    two calls in one process differ in depth and width."""
    draw = random.Random(f"5.2/{seed}")
    runs = []
    for i, world in enumerate(WORLDS):
        depths, widths = draw.sample(DEPTHS, 2), draw.sample(WIDTHS, 2)
        calls = [
            {
                "depth": depths[call],
                "width": widths[call],
                "rows": draw.choice(ROWS),
                "steps": STEPS[call],  # 2 then 3: both, in every launch
                "seed": draw.randrange(1000),
            }
            for call in range(2)
        ]
        runs.append((world, DTYPES[(i + seed) % len(DTYPES)], calls))
    return runs


class _Optimizers:
    """The check's make_optimizer: Adam on what it is given. Each one made is written down,
    with the call of the answer it was made in and the calls it stepped in (an optimizer kept
    from an earlier call steps in a later one)."""

    def __init__(self, lr: float):
        self.lr, self.made, self.call = lr, [], 0

    def __call__(self, params):
        import torch

        params = list(params)
        flat = [p for i in params for p in (i["params"] if isinstance(i, dict) else [i])]
        optimizer = torch.optim.Adam(params, lr=self.lr)
        record = {"params": flat, "call": self.call, "stepped": set()}
        optimizer.register_step_post_hook(lambda *_: record["stepped"].add(self.call))
        self.made.append(record)
        return optimizer


class _Watch:
    """While open: each DeviceMesh made (its shape), each entry into the model's forward and
    each through model(x) (a pre-hook, registered before the answer's), and, at each block's
    forward, how many blocks hold their full weights (plain tensors, not DTensor shards)."""

    def __init__(self, model):
        self.model, self.meshes, self.forwards, self.calls, self.held = model, [], 0, 0, 0

    def __enter__(self):
        from torch.distributed.device_mesh import DeviceMesh
        from torch.distributed.tensor import DTensor

        model, real_init = self.model, DeviceMesh.__init__
        self._real_init = real_init

        def made(mesh, *args, **kwargs):
            real_init(mesh, *args, **kwargs)
            self.meshes.append(list(mesh.mesh.shape))

        DeviceMesh.__init__ = made
        real_forward = model.forward

        def forward(*args, **kwargs):
            self.forwards += 1
            return real_forward(*args, **kwargs)

        def called(*_):
            self.calls += 1

        def block_runs(*_):
            whole = [not isinstance(b.linear.weight, DTensor) for b in model.blocks]
            self.held = max(self.held, sum(whole))

        model.forward = forward  # model(x) reaches it too: __call__ calls self.forward
        self._hooks = [model.register_forward_pre_hook(called)]
        self._hooks += [b.register_forward_pre_hook(block_runs) for b in model.blocks]
        return self

    def __exit__(self, *exc):
        from torch.distributed.device_mesh import DeviceMesh

        DeviceMesh.__init__ = self._real_init
        del self.model.forward
        for hook in self._hooks:
            hook.remove()

    @property
    def past_hooks(self) -> bool:
        return self.forwards > self.calls


def _everyone(tag: str, mine: dict) -> list[dict]:
    """Every rank's `mine`, exchanged through the group's store, not a collective: a rank
    that the answer left inside a collective cannot be matched with the check's own."""
    import torch.distributed as dist

    store = dist.distributed_c10d._get_default_store()
    rank, world = dist.get_rank(), dist.get_world_size()
    store.set(f"ddp-check-fsdp/{tag}/{rank}", json.dumps(mine))
    keys = [f"ddp-check-fsdp/{tag}/{r}" for r in range(world)]
    store.wait(keys)
    return [json.loads(store.get(key)) for key in keys]


def _batches(case: dict, dtype: str, rank: int, world: int) -> list:
    import torch

    xs, ys = make_batches(case["steps"], case["rows"] * world, case["seed"], getattr(torch, dtype))
    return [(my_rows(x, rank, world), my_rows(y, rank, world)) for x, y in zip(xs, ys, strict=True)]


def _fsdp_harness(train_fsdp, calls, dtype):
    """On each rank: the answer called once per case of `calls`, in one process, on one mesh
    made before it (the answer must make none), with the check's make_optimizer; then DDP
    trained beside it. What each call showed, per rank, up to the first that stops."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FSDPModule

    with process_group():
        rank, world = dist.get_rank(), dist.get_world_size()
        mesh = init_device_mesh("cpu", (world,))
        records, optimizers = [], _Optimizers(LR)
        for call, case in enumerate(calls):
            model = make_model(case["width"], case["depth"], case["seed"], getattr(torch, dtype))
            batches = _batches(case, dtype, rank, world)
            optimizers.call, raised = call, None
            with _Watch(model) as watch:
                try:
                    losses = train_fsdp(model, mesh, optimizers, batches)
                except Exception as exc:  # noqa: BLE001 - judged below, or raised again
                    raised = exc
            # Past the hooks matters where the root has FSDP's: a plain root has none.
            past = watch.past_hooks and isinstance(model, FSDPModule)
            mine = {"meshes": watch.meshes, "past_hooks": past}
            everyone = _everyone(f"{call}", {**mine, "raised": raised is not None})
            record = _stopped(everyone, raised)
            if record is None:
                record = _trained(model, mesh, optimizers, losses, watch, case, dtype, batches)
            records.append(record)
            if record.get("stop"):
                break
        return records


def _stopped(everyone: list[dict], raised) -> dict | None:
    """What ends the run after the answer's call: forward past the hooks or a mesh of its
    own, on any rank (named, whatever else it raised); an exception of its own, raised again
    on the rank that raised it. None when every rank returned."""
    for rank, seen in enumerate(everyone):
        if seen["past_hooks"]:
            error = "" if raised is None else f"{type(raised).__name__}: {raised}"
            return {"stop": True, "past_hooks": rank, "error": error.split("!")[0][:200]}
    for rank, seen in enumerate(everyone):
        if seen["meshes"]:
            return {"stop": True, "meshes": [rank, seen["meshes"]]}
    if raised is not None:
        raise raised
    if any(seen["raised"] for seen in everyone):
        return {"stop": True, "peer_raised": True}  # the launcher shows that rank's error
    return None


def _trained(model, mesh, optimizers, losses, watch, case, dtype, batches) -> dict:
    """What one call left: how the model is sharded, what the optimizers hold, the losses
    returned, and the weights gathered whole against DDP's, trained here from the same
    weights on the same rows with the same optimizer."""
    import torch
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.tensor import DTensor

    params = dict(model.named_parameters())
    sharded = {n for n, p in params.items() if isinstance(p, DTensor)}
    whole = {n: (p.full_tensor() if n in sharded else p).detach() for n, p in params.items()}
    ref_losses, ref = _ddp(case, dtype, batches)
    eps = torch.finfo(getattr(torch, dtype)).eps
    first = make_model(case["width"], case["depth"], case["seed"], getattr(torch, dtype))
    return {
        "numel": sum(p.numel() for p in whole.values()),
        "moved": [n for n, p in first.named_parameters() if not torch.equal(p, whole[n])],
        "root": isinstance(model, FSDPModule),
        "blocks": [isinstance(b, FSDPModule) for b in model.blocks],
        "held": watch.held,
        "plain": sorted(set(params) - sharded),
        "off_mesh": [n for n in sorted(sharded) if params[n].device_mesh is not mesh],
        "optimizers": _optimizers_seen(optimizers, params),
        "losses": to_plain(losses),
        "ref_losses": ref_losses,
        "apart": {n: [_units(whole[n], w, eps), _largest(whole[n], w)] for n, w in ref.items()},
        "eps": eps,
    }


def _optimizers_seen(optimizers, params: dict) -> dict:
    """How many optimizers this call made, and what each that stepped in it holds: how
    many parameters, how many not the model's, how many of those plain tensors."""
    from torch.distributed.tensor import DTensor

    ids, call = {id(p) for p in params.values()}, optimizers.call
    stepped = []
    for made in optimizers.made:
        if call in made["stepped"]:
            others = [p for p in made["params"] if id(p) not in ids]
            plain = [p for p in others if not isinstance(p, DTensor)]
            stepped.append(
                {
                    "total": len(made["params"]),
                    "not_model": len(others),
                    "plain": len(plain),
                    "plain_numel": sum(p.numel() for p in plain),  # whole, or shards?
                }
            )
    return {"made": sum(made["call"] == call for made in optimizers.made), "stepped": stepped}


def _largest(got, want) -> float:
    return (got.double() - want.double()).abs().max().item()


def _units(got, want, eps: float) -> float:
    """The largest |got - want| / max(1, |want|), in units of eps (nan stays nan)."""
    got, want = got.double(), want.double()
    return ((got - want).abs() / want.abs().clamp(min=1.0)).max().item() / eps


def _ddp(case: dict, dtype: str, batches) -> tuple[list, dict]:
    """DDP from the same weights on the same rows, with the same optimizer: its losses and
    its weights after training."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    ddp = DDP(make_model(case["width"], case["depth"], case["seed"], getattr(torch, dtype)))
    optimizer = _Optimizers(LR)(ddp.parameters())
    losses = []
    for x, y in batches:
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses, {n: p.detach() for n, p in ddp.module.named_parameters()}


def _check_fsdp(fn, seed: int = CHECK_SEED) -> Phrase:
    for world, dtype, calls in _draws(seed):
        with trying(ranks=world, dtype=dtype):
            runs = run_on_ranks(_fsdp_harness, fn, calls, dtype, nprocs=world, timeout=HANG)
            for call, case in enumerate(calls):
                model = Phrase("fsdp_model", depth=case["depth"], width=case["width"])
                with trying(call=call + 1, model=model):
                    _judge_call([run[call] for run in runs], case)
    return Phrase("fsdp_ok", tolerance=TOLERANCE)


def _judge_call(records: list[dict], case: dict) -> None:
    """One call on every rank: the Wrong that names what is off, if anything is."""
    first = records[0]
    if "past_hooks" in first:
        error = first["error"]
        what = Phrase("fsdp_forward_raised", error=error) if error else ""
        raise Wrong("fsdp_forward", what=what)
    if "meshes" in first:
        rank, shapes = first["meshes"]
        how = Phrase("fsdp_mesh_made", rank=rank, count=len(shapes), shape=tuple(shapes[0]))
        raise Wrong("fsdp_mesh", how=how)
    for record in records:
        if record["off_mesh"]:
            raise Wrong("fsdp_mesh", how=Phrase("fsdp_mesh_other", name=record["off_mesh"][0]))
    _judge_sharding(records, case)
    _judge_optimizer(first)
    for rank, record in enumerate(records):
        _judge_losses(record, rank, case)
    for record in records:
        name, (units, diff) = max(record["apart"].items(), key=lambda kv: _nan_first(kv[1][0]))
        if not units <= TOLERANCE:
            raise Wrong("fsdp_weights", name=name, diff=diff)


def _nan_first(units: float) -> float:
    return float("inf") if units != units else units


def _judge_sharding(records: list[dict], case: dict) -> None:
    """Every block and the root FSDPModules, and what the learner sees when they are not."""
    first, depth = records[0], case["depth"]
    blocks = first["blocks"]
    if not first["root"] and not any(blocks):
        raise Wrong("fsdp_none")
    if not first["root"]:
        drift = [
            (diff, rank)
            for rank, record in enumerate(records)
            for name, (_, diff) in record["apart"].items()
            if name in record["plain"]
        ]
        diff, rank = max(drift)
        names = and_list(sorted({n.split(".")[0] for n in first["plain"]}))
        raise Wrong("fsdp_blocks_only", names=names, rank=rank, diff=diff)
    if not any(blocks):
        held = max(r["held"] for r in records)
        raise Wrong("fsdp_root_only", depth=depth, held=held, per_block=PER_BLOCK_HELD)
    missed = [i for i, sharded in enumerate(blocks) if not sharded]
    if missed:
        key = "fsdp_missed_one" if len(missed) == 1 else "fsdp_missed_many"
        which = Phrase(key, blocks=and_list(missed))
        raise Wrong("fsdp_blocks_missed", which=which, depth=depth)


def _judge_optimizer(record: dict) -> None:
    """The optimizers that stepped in this call hold the model's own parameters; one was
    made with make_optimizer (or kept from an earlier call, which these name)."""
    made, stepped = record["optimizers"]["made"], record["optimizers"]["stepped"]
    for optimizer in stepped:
        if optimizer["not_model"]:
            key = "fsdp_optimizer_plain" if optimizer["plain"] else "fsdp_optimizer_other"
            raise Wrong(
                "fsdp_optimizer_before",
                count=optimizer["not_model"],
                total=optimizer["total"],
                what=Phrase(key),
            )
    if not made and not stepped:
        raise Wrong("fsdp_no_optimizer")


def _judge_losses(record: dict, rank: int, case: dict) -> None:
    got, want, eps = record["losses"], record["ref_losses"], record["eps"]
    floats = isinstance(got, (list, tuple)) and all(isinstance(x, float) for x in got)
    if not floats or len(got) != len(want):
        raise Wrong("fsdp_return", got=shown(got)[:120], steps=case["steps"])
    for step, (g, w) in enumerate(zip(got, want, strict=True)):
        if not abs(g - w) <= TOLERANCE * eps * max(1.0, abs(w)):
            raise Wrong("fsdp_losses", rank=rank, step=step + 1, got=g, want=w)


exercise = Exercise(
    "5.2",
    "train_fsdp",
    _check_fsdp,
    train_fsdp,
    texts=MESSAGES,
    hints=("fsdp_blocks", "fsdp_mesh", "fsdp_optimizer", "fsdp_hooks", "fsdp_loop", "fsdp_code"),
    mistakes={
        "fsdp_forward": Mistake(hint="fsdp_hooks"),
        "fsdp_mesh": Mistake(hint="fsdp_mesh"),
        "fsdp_none": Mistake(hint="fsdp_blocks"),
        "fsdp_root_only": Mistake(hint="fsdp_blocks"),
        "fsdp_blocks_only": Mistake(hint="fsdp_blocks"),
        "fsdp_blocks_missed": Mistake(hint="fsdp_blocks"),
        "fsdp_no_optimizer": Mistake(hint="fsdp_optimizer"),
        "fsdp_optimizer_before": Mistake(hint="fsdp_optimizer"),
        "fsdp_return": Mistake(hint="fsdp_loop"),
        "fsdp_losses": Mistake(hint="fsdp_loop"),
        "fsdp_weights": Mistake(hint="fsdp_loop"),
        **rank_mistakes(hint="fsdp_hooks"),
    },
    hidden=on_hidden_seeds(_check_fsdp),
    space=SPACE,
    hang_timeout=HANG,
    run_time=RUN_TIME,
    further=False,
)
