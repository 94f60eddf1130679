"""5.1 ShardedOptimizer: ZeRO-1 by hand, checked bit for bit against DDP with the whole optimizer.

The learner's class gives each trainable parameter one owner (balanced by size), builds this
rank's optimizer over the parameters it owns (make_optimizer, the check's spy), and in step()
steps that optimizer, then broadcasts each parameter from its owner. The DDP model has
averaged the gradients in backward already.

The check runs on real ranks (3 ranks, then 2 machines x 1 rank). On each rank: two models
of drawn widths and depths (a frozen bias and a buffer in each), one in float32 and one in
float64, each with its own optimizer (SGD with momentum for one, AdamW for the other: each
call of the answer draws its optimizer, which no axis of space.py names), each wrapped in DDP
with a ShardedOptimizer, both alive in one process and stepped in turn; the reference is the
same DDP model from the same weights with the whole optimizer. Judged: what each rank's
optimizer was given (shards disjoint, covering every trainable parameter, balanced by size;
the frozen bias may be left out or given: it has no gradient, so no optimizer keeps state for
it or changes it), the parameters bit for bit the reference's on every rank after every step,
no gradient reduced again in step(), and the optimizer state each rank holds, measured.
"""

from __future__ import annotations

import os
import random

from ...i18n import messages
from ..devices import collectives, made_off_device
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
    "exercises.lesson05.zero",
    {
        "hint.zero_shard": (
            "Every rank works out the same table of owners, from the same parameters in the "
            "same order, so no message is needed: keep the trainable parameters (the frozen "
            "one has no gradient) and let owners_by_size(params, dist.get_world_size()), given "
            "above the class, give each its owner. This rank's optimizer is make_optimizer "
            "over the parameters it owns (owner == dist.get_rank()), and only those. Keep the "
            "table and the optimizer on self: each ShardedOptimizer its own."
        ),
        "hint.zero_step": (
            "DDP's backward has already averaged every gradient: step() reduces nothing "
            "again. The inner optimizer updates the parameters this rank owns; then every rank "
            "calls dist.broadcast for every parameter, in the same order, from that "
            "parameter's owner, so that each update reaches every rank."
        ),
        "hint.zero_code": (
            "In __init__: self.params = [p for p in params if p.requires_grad]; self.owner = "
            "owners_by_size(self.params, dist.get_world_size()); then self.optimizer = "
            "make_optimizer([p for p in self.params if self.owner[p] == dist.get_rank()]). In "
            "step(): self.optimizer.step(), then for p in self.params: "
            "dist.broadcast(p.detach(), src=self.owner[p])."
        ),
        "zero_shape": (
            "ShardedOptimizer(params, make_optimizer) made an object of type {got}, which has "
            "no {missing}: the "
            "training loop calls zero_grad() and step() on it. Define both as methods of the "
            "class (at the class's indentation, not inside __init__), and check the class "
            "itself: ShardedOptimizer, not ShardedOptimizer(...)."
        ),
        "zero_shape.title": "no zero_grad() or step() on the object made",
        "zero_unmade": (
            "On rank {rank}, ShardedOptimizer(...) never called make_optimizer: build this "
            "rank's optimizer with it (make_optimizer(the parameters this rank owns)), so that "
            "its hyperparameters are the caller's."
        ),
        "zero_unmade.title": "make_optimizer never called",
        "zero_not_params": (
            "Rank {rank}'s optimizer was given {count} tensor(s) that are not the model's "
            "parameters (copies, or p.data): stepping them never changes the model. Give "
            "make_optimizer the parameters themselves."
        ),
        "zero_not_params.title": "the optimizer given copies, not the parameters",
        "zero_kept": (
            "Two ShardedOptimizers in one process share what should be each one's own (a "
            "class attribute or a global, set by one and read by the other): {how}. Keep "
            "everything on self, made in __init__."
        ),
        "zero_kept_given": (
            "the second one's optimizer was given {count} parameter(s) of the first one's "
            "model (rank {rank})"
        ),
        "zero_kept_stepped": (
            "in {steps} steps of each, the first one's optimizer was stepped {first} times and "
            "the second one's {second} (rank {rank})"
        ),
        "zero_kept.title": "state kept across instances (a class attribute or a global)",
        "zero_local": (
            "On {machines} machines, ranks {ranks} were given the same parameters ({count} "
            "of them): each took the shard of its LOCAL_RANK, or counted LOCAL_WORLD_SIZE "
            "ranks, and those count the ranks of one machine. ZeRO shards over every rank of "
            "the job: dist.get_rank() and dist.get_world_size()."
        ),
        "zero_local.title": "shards cut by LOCAL_RANK, not by the global rank",
        "zero_all": (
            "Every rank's optimizer was given all {count} trainable parameters; the ranks held "
            "{held} elements of optimizer state, where DDP's optimizer holds {full} on every "
            "rank. Give each rank's optimizer only the parameters it owns: then no rank keeps "
            "state for parameters it does not step."
        ),
        "zero_all.title": "every rank steps every parameter (no memory saved)",
        "zero_overlap": (
            "The shards overlap: {name} was given to the optimizers of ranks {ranks} "
            "({count} parameter(s) to more than one rank). Each parameter has one owner, "
            "the same on every rank."
        ),
        "zero_overlap.title": "shards that overlap",
        "zero_missing": (
            "{name} ({elements} elements) was given to no rank's optimizer ({count} trainable "
            "parameter(s) left out): nobody steps it, and it never changes. Every trainable "
            "parameter needs an owner."
        ),
        "zero_missing.title": "a parameter left out (never stepped)",
        "zero_one_rank": (
            "Rank {rank}'s optimizer was given every trainable parameter, the others' none: "
            "rank {rank} holds all the optimizer state, as much as under DDP. Share the "
            "parameters out among all {world} ranks."
        ),
        "zero_one_rank.title": "every parameter on one rank",
        "zero_world": (
            "On {world} ranks, {empty} got no parameter, while ranks {busy} share them all, "
            "as if there were {busy_count} ranks: a rank that owns nothing holds no optimizer "
            "state, and the others hold more than their share. (Torch's optimizers refuse an "
            "empty list; the check gave the optimizer a stand-in.) With at least as many "
            "trainable parameters as ranks, every rank owns some: count the ranks with "
            "dist.get_world_size()."
        ),
        "zero_world.title": "a rank left without a shard, as for fewer ranks",
        "zero_rank_one": "rank {ranks}",
        "zero_rank_many": "ranks {ranks}",
        "zero_unbalanced": (
            "The shards are uneven: rank {rank} owns {most} of the {total} trainable "
            "elements, more than an even share ({even}) plus the largest parameter "
            "({largest}); the ranks own {owned}. ZeRO saves memory "
            "only as far as the largest shard is small: balance by elements, not by count "
            "(largest parameter first, to the rank with the fewest elements so far)."
        ),
        "zero_unbalanced.title": "shards not balanced by size",
        "zero_twice": (
            "step() reduced gradients again ({count} of them, in {collective}()): DDP's "
            "backward has already averaged them, so that is a second average, and a second "
            "all-reduce's traffic each step. Step the inner optimizer on the gradients as "
            "they are."
        ),
        "zero_divided": (
            "After step {step}, rank {rank}'s parameters are those of gradients divided by "
            "{world} once more (DDP's backward has already averaged them), not DDP's. Step the "
            "inner optimizer on the gradients as they are."
        ),
        "zero_twice.title": "gradients averaged twice",
        "zero_divided.title": "gradients averaged twice",
        "zero_not_shared": (
            "After step {step}, rank {rank}'s copies of the {count} parameter(s) other ranks "
            "own were as before the step: their owners' updates never reached it, and the "
            "ranks' models now differ. After the inner optimizer's step, broadcast every "
            "parameter from its owner."
        ),
        "zero_not_shared.title": "the updates never shared (no broadcast)",
        "zero_params": (
            "After step {step}, on rank {rank}, {count} of the {total} parameters differ from "
            "those of DDP with the whole optimizer (first {name}, by up to {diff:.1e})."
        ),
        "zero_params.title": "not DDP's parameters",
        "tried_optimizer": "{v} as the optimizer",
        "zero_ok": (
            "Bit for bit the parameters of DDP with the whole optimizer, on every rank after "
            "each of {steps} steps, on 3 ranks and on 2 machines x 1 rank, with two "
            "ShardedOptimizers in one process (SGD with momentum and AdamW, float32 and "
            "float64, models of {sizes} trainable elements with a frozen bias and a buffer); "
            "each rank's optimizer had a shard of its own (disjoint, every trainable "
            "parameter covered, balanced by size), and no gradient was reduced again. "
            "Optimizer state measured on 3 ranks (AdamW, a model of {elements} trainable "
            "elements): ranks {ranks} held {held} elements of it, where DDP's optimizer holds "
            "{full} on every rank."
        ),
    },
)


def owners_by_size(params, world_size):
    """Each parameter's owner: largest first, to the rank owning the fewest elements so far."""
    held, owner = [0] * world_size, {}
    for p in sorted(params, key=lambda p: p.numel(), reverse=True):
        owner[p] = held.index(min(held))
        held[owner[p]] += p.numel()
    return owner


class ShardedOptimizer:
    """ZeRO-1: this rank keeps, and steps, the optimizer state of its shard of the parameters."""

    def __init__(self, params, make_optimizer):
        # params: the model's parameters (the same on every rank, a DDP model's);
        # make_optimizer(list_of_params) -> a torch optimizer over those params only.
        # BEGIN SOLUTION
        import torch.distributed as dist

        self.params = [p for p in params if p.requires_grad]  # the frozen ones have no state
        self.owner = owners_by_size(self.params, dist.get_world_size())
        mine = [p for p in self.params if self.owner[p] == dist.get_rank()]
        self.optimizer = make_optimizer(mine)
        # END SOLUTION

    def zero_grad(self):
        for p in self.params:  # all of them, not only this rank's: DDP all-reduces each
            p.grad = None

    def step(self):
        # BEGIN SOLUTION (continued)
        import torch.distributed as dist

        self.optimizer.step()  # this rank's shard only
        for p in self.params:  # in the same order on every rank
            dist.broadcast(p.detach(), src=self.owner[p])  # the owner's values, in place
        # END SOLUTION


# ---------------------------------------------------------------- the rank's side

OPTIMIZERS = {"sgd": "SGD(momentum=0.9)", "adamw": "AdamW"}


def _optimizer(kind: str, params):
    """The drawn optimizer over `params` (a list of tensors or of param groups)."""
    import torch

    if kind == "sgd":
        return torch.optim.SGD(params, lr=0.05, momentum=0.9)
    return torch.optim.AdamW(params, lr=0.01, weight_decay=0.1)


def _state_elements(optimizer) -> int:
    """How many elements the tensors of an optimizer's state hold (AdamW's step counts too)."""
    import torch

    return sum(
        t.numel() for state in optimizer.state.values() for t in state.values()
        if isinstance(t, torch.Tensor)
    )  # fmt: skip


def _tensors_of(params) -> tuple[list, list]:
    """(the tensors, the list to build an optimizer from): params read once, as a list of
    tensors or of param groups (their "params" read into lists too)."""
    import torch

    items, tensors = [], []
    for item in params:
        if isinstance(item, dict):
            group = item.get("params", [])
            group = [group] if isinstance(group, torch.Tensor) else list(group)
            items.append({**item, "params": group})
            tensors += group
        else:
            items.append(item)
            tensors.append(item)
    return tensors, items


class _Maker:
    """The check's make_optimizer for one model: notes what each call is given (by the
    parameter's place in its model, or [model, place] for the other model's, or -1 for a
    tensor of neither), makes the real optimizer and counts its steps. Given no parameter, it
    makes the optimizer over a stand-in of no elements (torch refuses an empty list), so
    that the check can name the shard that was empty."""

    def __init__(self, kind: str, known: dict, dtype):
        self.kind, self.known, self.dtype = kind, known, dtype
        self.calls: list[list] = []
        self.made: list = []
        self.steps = 0

    def __call__(self, params):
        import torch

        tensors, items = _tensors_of(params)
        self.calls.append([self.known.get(id(t), -1) for t in tensors])
        if not tensors:
            items = [torch.nn.Parameter(torch.zeros(0, dtype=self.dtype))]
        optimizer = _optimizer(self.kind, items)
        optimizer.register_step_post_hook(self._stepped)
        self.made.append(optimizer)
        return optimizer

    def _stepped(self, *_):
        self.steps += 1

    def state(self) -> int:
        return sum(_state_elements(o) for o in self.made)


def _gradients_in(tensor, grads) -> set[int]:
    """The parameters (by place) whose gradient a tensor holds: it is that gradient (its
    storage), or its values are somewhere in it (a flat copy)."""
    import torch

    if not isinstance(tensor, torch.Tensor) or tensor.is_meta:
        return set()
    flat = tensor.detach().reshape(-1)
    found = set()
    for i, (pointer, g) in grads.items():
        if tensor.untyped_storage().data_ptr() == pointer:
            found.add(i)
        elif flat.dtype == g.dtype and flat.numel() >= g.numel() > 0:
            starts = (flat == g[0]).nonzero().reshape(-1)[:50].tolist()
            if any(torch.equal(flat[s : s + g.numel()], g) for s in starts):
                found.add(i)
    return found


class _Reductions:
    """While open, torch.distributed's reducing collectives (all_reduce, reduce_scatter, ...)
    note which gradients they are handed (before the call): `found` {place: collective}."""

    def __init__(self, params):
        self.grads = {
            i: (p.grad.untyped_storage().data_ptr(), p.grad.detach().reshape(-1).clone())
            for i, p in enumerate(params)
            if p.grad is not None
        }
        self.found: dict[int, str] = {}

    def __enter__(self):
        import torch.distributed as dist

        self.real = {name: getattr(dist, name) for name in collectives() if "reduce" in name}
        for name, fn in self.real.items():
            setattr(dist, name, self._watched(name, fn))
        return self

    def _watched(self, name, fn):
        def call(*args, **kwargs):
            for value in (*args, *kwargs.values()):
                for tensor in value if isinstance(value, (list, tuple)) else [value]:
                    for i in _gradients_in(tensor, self.grads):
                        self.found.setdefault(i, name)
            return fn(*args, **kwargs)

        return call

    def __exit__(self, *exc):
        import torch.distributed as dist

        for name, fn in self.real.items():
            setattr(dist, name, fn)


def _loss(ddp, x, y):
    import torch

    return torch.nn.functional.mse_loss(ddp(x), y)


def _reference(case: dict, steps: int, rank: int, world: int) -> dict:
    """DDP with the whole optimizer: the parameters after each step, its state's elements, and
    the parameters after step 1 with the gradients divided by the world size once more."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    dtype = getattr(torch, case["dtype"])
    ddp = DDP(make_model(case["width"], case["depth"], case["seed"], dtype))
    params = list(ddp.parameters())
    start = [p.detach().clone() for p in params]
    optimizer = _optimizer(case["kind"], params)
    x, y = make_batches(steps, 4 * world, case["seed"] + 1, dtype)
    after, divided = [], None
    for step in range(steps):
        optimizer.zero_grad()
        _loss(ddp, my_rows(x[step], rank, world), my_rows(y[step], rank, world)).backward()
        if step == 0:
            divided = _divided_step(case["kind"], start, params, world)
        optimizer.step()
        after.append([p.detach().clone() for p in params])
    return {"after": after, "divided": divided, "state": _state_elements(optimizer)}


def _divided_step(kind: str, start, params, world: int) -> list:
    """The parameters after one step from `start` with each gradient divided by `world`."""
    import torch

    copies = [torch.nn.Parameter(s.clone(), requires_grad=p.requires_grad)
              for s, p in zip(start, params, strict=True)]  # fmt: skip
    for c, p in zip(copies, params, strict=True):
        c.grad = None if p.grad is None else p.grad / world
    _optimizer(kind, copies).step()
    return [c.detach() for c in copies]


def _zero_harness(cls, cases: list[dict], steps: int) -> dict:
    """One rank: the reference for each case, then the answer: a ShardedOptimizer per case
    (both in this process), what each one's make_optimizer was given (shared among the ranks:
    where the shards are no partition, no step is taken, on any rank), then `steps` steps of
    every case in turn, each judged against the reference here; last, the off-device probe."""
    import torch.distributed as dist

    with process_group():
        rank, world = dist.get_rank(), dist.get_world_size()
        refs = [_reference(case, steps, rank, world) for case in cases]
        ddps, makers = _answer_models(cls, cases, rank, world)
        opts = [cls(ddp.parameters(), maker) for ddp, maker in zip(ddps, makers, strict=True)]
        shape = [_lacks(opt) for opt in opts if _lacks(opt)]
        if shape:  # the same on every rank: none goes on
            return {"shape": shape[0]}
        given = [m.calls for m in makers]
        everyone = [None] * world
        dist.all_gather_object(everyone, given)
        local = [None] * world
        dist.all_gather_object(local, int(os.environ.get("LOCAL_RANK", rank)))
        infos = [_info(ddp.module) for ddp in ddps]
        record = {"given": given, "local": local, "full": [r["state"] for r in refs]}
        record["info"] = infos
        if any(_partition_fault(info, _shards(everyone, k)) for k, info in enumerate(infos)):
            return record  # every rank stops here: everyone's shards are the same to all
        record.update(_answer_steps(cases, steps, ddps, opts, refs, rank, world))
        record["state"] = [m.state() for m in makers]
        record["stepped"] = [m.steps for m in makers]
        record["off_device"] = made_off_device(_probe, cls, cases[0], rank, world)
        return record


def _lacks(opt) -> list | None:
    """[what the answer made, the methods it lacks], or None if it has zero_grad and step."""
    missing = [name for name in ("zero_grad", "step") if not callable(getattr(opt, name, None))]
    return [type(opt).__name__, missing] if missing else None


def _answer_models(cls, cases, rank, world):
    """The answer's DDP models (from the reference's weights) and their makers: each knows the
    parameters of every case's model, by place."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    ddps = [
        DDP(make_model(c["width"], c["depth"], c["seed"], getattr(torch, c["dtype"])))
        for c in cases
    ]
    known = {}
    for k, ddp in enumerate(ddps):
        known.update({id(p): [k, i] for i, p in enumerate(ddp.parameters())})
    makers = []
    for k, case in enumerate(cases):
        own = {key: (tag[1] if tag[0] == k else tag) for key, tag in known.items()}
        makers.append(_Maker(case["kind"], own, getattr(torch, case["dtype"])))
    return ddps, makers


def _answer_steps(cases, steps, ddps, opts, refs, rank, world) -> dict:
    """Every case stepped in turn, `steps` times: per case, the first step whose parameters
    are not the reference's (judged here: _apart) and the gradients each step() reduced."""
    import torch

    batches = [
        make_batches(steps, 4 * world, c["seed"] + 1, getattr(torch, c["dtype"])) for c in cases
    ]
    apart = [None] * len(cases)
    reduced = [{} for _ in cases]
    for step in range(steps):
        for k, (ddp, opt, (x, y)) in enumerate(zip(ddps, opts, batches, strict=True)):
            params = list(ddp.parameters())
            opt.zero_grad()
            _loss(ddp, my_rows(x[step], rank, world), my_rows(y[step], rank, world)).backward()
            before = [p.detach().clone() for p in params]
            with _Reductions(params) as watch:
                opt.step()
            for i, name in watch.found.items():
                reduced[k].setdefault(str(i), name)
            if apart[k] is None:
                apart[k] = _apart(params, before, refs[k], step)
    return {"apart": apart, "reduced": reduced}


def _apart(params, before, ref: dict, step: int) -> dict | None:
    """How the answer's parameters after `step` stand to the reference's: None if equal bit
    for bit; else the step, the places that differ, whether each of those is as it was before
    the step, how far they are, and (at step 0) how far from the divided step's."""
    import torch

    want = ref["after"][step]
    differ = [i for i, (p, w) in enumerate(zip(params, want, strict=True)) if not torch.equal(p, w)]
    if not differ:
        return None

    def far(others):
        return max((params[i].double() - others[i].double()).abs().max().item() for i in differ)

    return {
        "step": step,
        "differ": differ,
        "unchanged": [i for i in differ if torch.equal(params[i], before[i])],
        "diff": far(want),
        "divided": far(ref["divided"]) if step == 0 else None,
    }


def _probe(cls, case, rank, world) -> None:
    """A step of a fresh ShardedOptimizer (made_off_device runs it with the default device
    moved away from the model's)."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    dtype = getattr(torch, case["dtype"])
    ddp = DDP(make_model(case["width"], case["depth"], case["seed"], dtype))
    opt = cls(ddp.parameters(), lambda params: _optimizer(case["kind"], params))
    x, y = make_batches(1, 4 * world, case["seed"] + 1, dtype)
    opt.zero_grad()
    _loss(ddp, my_rows(x[0], rank, world), my_rows(y[0], rank, world)).backward()
    opt.step()


# ---------------------------------------------------------------- judging


def _info(model) -> dict:
    """The names, sizes and trainable places of a model's parameters (the rank's record)."""
    named = list(model.named_parameters())
    return {
        "names": [n for n, _ in named],
        "sizes": [p.numel() for _, p in named],
        "trainable": [i for i, (_, p) in enumerate(named) if p.requires_grad],
    }


def _shards(everyone: list, k: int) -> list[list]:
    """Case k's make_optimizer calls on each rank: [rank][call][tag]."""
    return [given[k] for given in everyone]


def _own(calls: list[list], info: dict) -> set[int]:
    """The trainable places of its own model a rank's optimizers were given."""
    return {t for call in calls for t in call if isinstance(t, int) and t in info["trainable"]}


def _partition_fault(info: dict, shards: list[list]) -> tuple[str, dict] | None:
    """What makes the shards no partition of the trainable parameters, one owner each: a rank
    that made no optimizer, tensors not its model's, overlap, a parameter left out. (Every
    rank given every parameter is no fault here: steps can be taken, and the state measured.)"""
    for rank, calls in enumerate(shards):
        if not calls:
            return "zero_unmade", {"rank": rank}
    for rank, calls in enumerate(shards):
        other = [t for call in calls for t in call if isinstance(t, list)]
        if other:
            return "zero_kept", {"count": len(other), "rank": rank}
        foreign = [t for call in calls for t in call if t == -1]
        if foreign:
            return "zero_not_params", {"rank": rank, "count": len(foreign)}
    owned = [_own(calls, info) for calls in shards]
    trainable = set(info["trainable"])
    if all(own == trainable for own in owned) and len(owned) > 1:
        return None
    for i in info["trainable"]:
        holders = [rank for rank, own in enumerate(owned) if i in own]
        if len(holders) > 1:
            count = sum(sum(i in own for own in owned) > 1 for i in trainable)
            return "zero_overlap", {"name": info["names"][i], "ranks": holders, "count": count}
    missing = [i for i in info["trainable"] if not any(i in own for own in owned)]
    if missing:
        i = missing[0]
        fields = {"name": info["names"][i], "elements": info["sizes"][i], "count": len(missing)}
        return "zero_missing", fields
    return None


def _judge_shards(
    info: dict, shards: list[list], local: list[int], machines: int, measured: dict | None
) -> None:
    """The Wrong that names what is off with one case's shards, if anything is: what makes
    them no partition (a rank without an optimizer, tensors of another model or none, the
    shard of a LOCAL_RANK, overlap, a parameter left out), then how they are shared out."""
    fault = _partition_fault(info, shards)
    if fault is not None and fault[0] == "zero_kept":
        raise Wrong("zero_kept", how=Phrase("zero_kept_given", **fault[1]))
    if fault is not None and fault[0] in ("zero_unmade", "zero_not_params"):
        raise Wrong(fault[0], **fault[1])
    owned = [_own(calls, info) for calls in shards]
    world, trainable = len(owned), set(info["trainable"])
    same = [r for r in range(world) if r != local[r] and owned[r] and owned[r] == owned[local[r]]]
    if machines > 1 and same:
        ranks = and_list([local[same[0]], same[0]])
        raise Wrong("zero_local", machines=machines, ranks=ranks, count=len(owned[same[0]]))
    if fault is not None:
        key, fields = fault
        if key == "zero_overlap":
            fields = {**fields, "ranks": and_list(fields["ranks"])}
        raise Wrong(key, **fields)
    if all(own == trainable for own in owned):
        held = and_list(measured["state"] if measured else ["?"])
        full = measured["full"] if measured else "?"
        raise Wrong("zero_all", count=len(trainable), held=held, full=full)
    busy = [r for r, own in enumerate(owned) if own]
    if len(busy) == 1:
        raise Wrong("zero_one_rank", rank=busy[0], world=world)
    empty = [r for r, own in enumerate(owned) if not own]
    if empty and len(trainable) >= world:
        fields = {"busy": and_list(busy), "busy_count": len(busy)}
        raise Wrong("zero_world", world=world, empty=_ranks(empty), **fields)
    elements = [sum(info["sizes"][i] for i in own) for own in owned]
    total = sum(info["sizes"][i] for i in trainable)
    largest = max(info["sizes"][i] for i in trainable)
    if max(elements) > total / world + largest:
        most = elements.index(max(elements))
        fields = {"rank": most, "most": max(elements), "total": total, "even": total // world}
        fields["largest"] = largest
        raise Wrong("zero_unbalanced", owned=and_list(elements), **fields)


def _ranks(ranks: list[int]) -> Phrase:
    """'rank 2' or 'ranks 1 and 2'."""
    key = "zero_rank_one" if len(ranks) == 1 else "zero_rank_many"
    return Phrase(key, ranks=and_list(ranks))


def _judge_steps(runs: list[dict], k: int, info: dict, steps: int, world: int) -> None:
    """One case's steps on every rank: the Wrong that names what is off, if anything is."""
    stepped = [run["stepped"] for run in runs]
    for rank, counts in enumerate(stepped):
        if len(counts) > 1 and counts[k] != steps and max(counts) > steps:
            first, second = counts[0], counts[1]
            how = Phrase("zero_kept_stepped", steps=steps, first=first, second=second, rank=rank)
            raise Wrong("zero_kept", how=how)
    for run in runs:
        if run["reduced"][k]:
            name = next(iter(run["reduced"][k].values()))
            raise Wrong("zero_twice", count=len(run["reduced"][k]), collective=name)
    found = [(run["apart"][k]["step"], rank) for rank, run in enumerate(runs) if run["apart"][k]]
    if not found:
        return
    step, rank = min(found)
    apart, run = runs[rank]["apart"][k], runs[rank]
    mine = _own(run["given"][k], info)
    others = [i for i in info["trainable"] if i not in mine]
    with trying(step=step + 1):
        if others and apart["differ"] == others and apart["unchanged"] == others:
            raise Wrong("zero_not_shared", step=step + 1, rank=rank, count=len(others))
        if apart["divided"] is not None and apart["divided"] * 10 < apart["diff"]:
            raise Wrong("zero_divided", step=step + 1, rank=rank, world=world)
        name = info["names"][apart["differ"][0]]
        fields = {"count": len(apart["differ"]), "total": len(info["names"]), "name": name}
        raise Wrong("zero_params", step=step + 1, rank=rank, diff=apart["diff"], **fields)


# ---------------------------------------------------------------- the space and the check

# (ranks, machines): 3 ranks (uneven shards), then 2 machines x 1 rank (where LOCAL_RANK is 0
# on both); each run holds two ShardedOptimizers in one process, of two models drawn for the
# seed (_draws): widths and depths never the notebook's, one float32, one float64, one
# stepped by SGD with momentum and one by AdamW.
ZERO_RUNS = ((3, 1), (2, 2))
WIDTHS = (6, 10, 12, 20)
DEPTHS = (1, 2, 4)
STEPS = (2, 3)
SPACE = Space(
    drawn={
        "world": (2, 3),
        "machines": (1, 2),
        "calls": (2,),
        "steps": STEPS,
        "counts": {"width": WIDTHS, "depth": DEPTHS},
        "dtypes": ("float32", "float64"),
        "model": ("frozen", "buffer"),
        "device": ("cpu", "the default device moved off the model's (off_device)"),
    },
    why_not={
        "lengths": "the answer is handed a model's parameters, as many and as large as the "
        "drawn widths and depths make them (counts)",
    },
    notebook={"width": WIDTH, "depth": DEPTH},
)


# The check and the grader's two hidden draws make 6 launches of 2 and 3 ranks, each rank
# training 4 small DDP models (1.5 s for check(), 3.3 s for the hidden draws, medians of 5 on
# this 2-core machine at a load of 10): their time, with room.
RUN_TIME = 45.0


def _draws(seed: int) -> list[tuple[int, int, int, list[dict]]]:
    """(ranks, machines, steps, the two cases) of each run for this seed."""
    draw = random.Random(f"5.1/{seed}")
    steps, runs = draw.choice(STEPS), []
    for i, (ranks, machines) in enumerate(ZERO_RUNS):
        widths, depths = draw.sample(WIDTHS, 2), [draw.choice(DEPTHS) for _ in range(2)]
        kinds = ("sgd", "adamw") if (i + seed) % 2 == 0 else ("adamw", "sgd")
        cases = [
            {"width": w, "depth": d, "seed": 10 * seed + 2 * i + k, "kind": kind,
             "dtype": ("float32", "float64")[(k + i + seed) % 2]}
            for k, (w, d, kind) in enumerate(zip(widths, depths, kinds, strict=True))
        ]  # fmt: skip
        runs.append((ranks, machines, steps, cases))
    return runs


def _check_zero(cls, seed: int = CHECK_SEED) -> Phrase:
    measured, off_device = None, []
    for ranks, machines, steps, cases in _draws(seed):
        with trying(ranks=ranks, machines=machines):
            runs = run_on_ranks(_zero_harness, cls, cases, steps, nprocs=ranks, nnodes=machines)
            if "shape" in runs[0]:
                got, missing = runs[0]["shape"]
                raise Wrong("zero_shape", got=got, missing=and_list([f"{m}()" for m in missing]))
            infos = runs[0]["info"]
            for k, (case, info) in enumerate(zip(cases, infos, strict=True)):
                with trying(call=k + 1, dtype=case["dtype"], optimizer=OPTIMIZERS[case["kind"]]):
                    shards = [run["given"][k] for run in runs]
                    local = runs[0]["local"]
                    _judge_shards(info, shards, local, machines, _measured(runs, k))
            for k, (case, info) in enumerate(zip(cases, infos, strict=True)):
                with trying(call=k + 1, dtype=case["dtype"], optimizer=OPTIMIZERS[case["kind"]]):
                    _judge_steps(runs, k, info, steps, ranks)
            off_device += [run["off_device"] for run in runs if run["off_device"]]
            if measured is None:
                measured = _verdict_state(runs, cases, infos, steps)
    if off_device:
        raise Wrong("off_device", function="ShardedOptimizer.step", collective=off_device[0])
    return measured


def _measured(runs: list[dict], k: int) -> dict | None:
    """Case k's optimizer state, measured: each rank's, and the whole optimizer's."""
    if "state" not in runs[0]:
        return None
    return {"state": [run["state"][k] for run in runs], "full": runs[0]["full"][k]}


def _verdict_state(runs, cases, infos, steps) -> Phrase:
    """What the check says of a passing answer: the state each rank held (AdamW's model)."""
    k = next(k for k, case in enumerate(cases) if case["kind"] == "adamw")
    info = infos[k]
    return Phrase(
        "zero_ok",
        steps=steps,
        sizes=and_list([sum(i["sizes"][t] for t in i["trainable"]) for i in infos]),
        elements=sum(info["sizes"][t] for t in info["trainable"]),
        ranks=and_list(list(range(len(runs)))),
        held=and_list([run["state"][k] for run in runs]),
        full=runs[0]["full"][k],
    )


exercise = Exercise(
    "5.1",
    "ShardedOptimizer",
    _check_zero,
    ShardedOptimizer,
    texts=MESSAGES,
    hints=("zero_shard", "zero_step", "zero_code"),
    mistakes={
        "zero_shape": Mistake(hint="zero_step"),
        "zero_unmade": Mistake(hint="zero_shard"),
        "zero_not_params": Mistake(hint="zero_shard"),
        "zero_kept": Mistake(hint="zero_shard"),
        "zero_local": Mistake(hint="zero_shard"),
        "zero_all": Mistake(hint="zero_shard"),
        "zero_overlap": Mistake(hint="zero_shard"),
        "zero_missing": Mistake(hint="zero_shard"),
        "zero_one_rank": Mistake(hint="zero_shard"),
        "zero_world": Mistake(hint="zero_shard"),
        "zero_unbalanced": Mistake(hint="zero_shard"),
        "zero_twice": Mistake(hint="zero_step"),
        "zero_divided": Mistake(hint="zero_step"),
        "zero_not_shared": Mistake(hint="zero_step"),
        "zero_params": Mistake(hint="zero_step"),
        "off_device": Mistake(),
        **rank_mistakes(hint="zero_step"),
    },
    hidden=on_hidden_seeds(_check_zero),
    space=SPACE,
    run_time=RUN_TIME,
)
