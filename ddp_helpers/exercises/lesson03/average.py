"""3.2 average_gradients: the average DDP takes, by hand, checked against DDP's own."""

from __future__ import annotations

import copy

from ...i18n import messages
from ..devices import made_off_device
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
from ..races import unwaited, waits_required
from ..space import CHECK_SEED, Space, on_hidden_seeds, trying

MESSAGES = messages(
    "exercises.lesson03.average",
    {
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
        "hint.avg_none": (
            "A frozen parameter (requires_grad=False) gets no gradient: its .grad is None. "
            "Skip it, as DDP does."
        ),
        "hint.avg_fresh": (
            "Reduce p.grad itself, read afresh on every call: a copy (.float(), .to(...)) "
            "is another tensor, and the next step's gradients are new tensors too."
        ),
        "hint.avg_wait": (
            "dist.all_reduce(t, async_op=True) returns at once, before the sum is in t: "
            "keep the work it returns and call work.wait() before you read or divide t (or "
            "leave async_op out)."
        ),
        "avg_not_waited": (
            "{count} all_reduce(..., async_op=True) call(s) were never waited for: the sum "
            "lands in the gradient only after work.wait(), so what you divided was each "
            "rank's own gradient (here the check makes that certain; on a real run it "
            "depends on timing)."
        ),
        "avg_not_waited.title": "an async all_reduce never waited for",
        "avg_frozen": (
            "Your code raised {exception} on a parameter whose .grad is None: a frozen "
            "parameter (requires_grad=False) gets no gradient, and DDP leaves it out. Skip "
            "a parameter whose .grad is None."
        ),
        "avg_frozen.title": "did not skip a parameter without a gradient",
        "avg_stale": (
            "At step {step} the gradients did not change, though the first step's were "
            "averaged: the answer reduced tensors an earlier call had left (zero_grad() "
            "makes new .grad tensors every step). Read p.grad afresh on every call."
        ),
        "avg_stale.title": "reduced the gradients an earlier call left",
        "avg_copy": (
            "In {dtype} the gradients did not change, though in {other} they were averaged: "
            "the answer reduced a converted copy (p.grad.float() is a new tensor unless the "
            "gradient is float32 already) and never wrote it back. Reduce p.grad itself, or "
            "copy the result back into it."
        ),
        "avg_copy.title": "reduced a copy of the gradient, never written back",
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
            "ranks and on 2 machines x 2 ranks, in float32 and float64, step after step, "
            "with a frozen parameter and a buffer in the model; every tensor it sent made "
            "on the model's device."
        ),
    },
)


def average_gradients(model):
    import torch.distributed as dist

    world_size = dist.get_world_size()
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)  # SUM over the ranks ...
            p.grad /= world_size  # ... then divide (DDP divides first, then sums)


def _average_gradients_harness(average_gradients, dtype: str, steps: int):
    """On each rank, step after step: the learner's averaging next to DDP's, on the same
    data, with a model that has a frozen parameter (no gradient) and a buffer (BatchNorm's),
    in `dtype`; the gradients made afresh at every step (zero_grad sets them to None), and
    an async collective's result landing only where the answer waits for it (races.py)."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    with process_group():
        rank = dist.get_rank()
        torch.manual_seed(0)
        model = _model().to(getattr(torch, dtype))
        ddp = DDP(copy.deepcopy(model))
        records = []
        for step in range(steps):
            gen = torch.Generator().manual_seed(100 + 10 * step + rank)
            x = torch.randn(16, 4, generator=gen).to(model[0].weight.dtype)
            y = torch.randn(16, 2, generator=gen).to(x.dtype)
            model.zero_grad()
            ddp.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            local = [p.grad.clone() for p in _trained(model)]
            with waits_required() as works:
                try:
                    average_gradients(model)
                except (TypeError, AttributeError) as exc:  # the frozen bias's .grad is None
                    if "None" not in str(exc):
                        raise
                    return [{"frozen": type(exc).__name__}]
            torch.nn.functional.mse_loss(ddp(x), y).backward()
            records.append(_compared(_trained(model), _trained(ddp.module), local, works))
            records[-1]["unwaited"] = unwaited(works)
        records[-1]["off_device"] = made_off_device(average_gradients, model)
        return records


def _model():
    """A small model with a buffer (BatchNorm's running statistics) and a frozen parameter
    (the first layer's bias: no gradient, which the answer must skip)."""
    import torch

    model = torch.nn.Sequential(
        torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Tanh(), torch.nn.Linear(8, 2)
    )
    model[0].bias.requires_grad_(False)
    return model


def _trained(model) -> list:
    return [p for p in model.parameters() if p.requires_grad]


def _compared(mine, theirs, local, works) -> dict:
    """How the learner's gradients stand to DDP's: largest difference, size ratio, unchanged."""
    import torch

    a = torch.cat([p.grad.flatten() for p in mine])
    b = torch.cat([p.grad.flatten() for p in theirs])
    return {
        "diff": (a - b).abs().max().item(),
        "ratio": (a.norm() / b.norm()).item(),
        "unchanged": all(torch.equal(g, p.grad) for g, p in zip(local, mine, strict=True)),
    }


# (ranks, machines): two world sizes on one machine, and 2 machines x 2 ranks, where the
# ranks of one machine (LOCAL_WORLD_SIZE) are not all of them. Each run takes its dtype and
# its number of steps from the seed: check() float32 and float64 both, 2 steps; the
# grader's draws the other dtype on each layout, 3 steps.
AVG_RUNS = ((2, 1), (3, 1), (4, 2))
HANG = 10  # s: a rank left waiting (a run of the harness takes 0.3 s here) names a hang
SPACE = Space(
    drawn={
        "world": (2, 3, 4),
        "machines": (1, 2),
        "calls": (2, 3),
        "steps": (2, 3),
        "dtypes": ("float32", "float64"),
        "model": ("frozen", "buffer"),
        "device": ("cpu", "the default device moved off the model's (off_device)"),
    },
    why_not={
        "counts": "average_gradients(model) is given no count: the world size is the "
        "process group's, drawn above",
        "lengths": "it holds no data of its own: it walks the model's parameters",
    },
)


def _draws(seed: int):
    """(ranks, machines, dtype, steps) of each run for this seed."""
    dtypes = SPACE.values("dtypes")
    steps = 2 if seed == CHECK_SEED else 3
    return [
        (ranks, machines, dtypes[(i + seed) % len(dtypes)], steps)
        for i, (ranks, machines) in enumerate(AVG_RUNS)
    ]


def _check_average(fn, seed: int = CHECK_SEED) -> Phrase:
    worst_diff, off_device, averaged = 0.0, [], set()  # the dtypes it averaged right
    for ranks, machines, dtype, steps in _draws(seed):
        with trying(ranks=ranks, machines=machines, dtype=dtype):
            runs = run_on_ranks(
                _average_gradients_harness,
                fn,
                dtype,
                steps,
                nprocs=ranks,
                nnodes=machines,
                timeout=HANG,
            )
            frozen = [r[0]["frozen"] for r in runs if "frozen" in r[0]]
            if frozen:
                raise Wrong("avg_frozen", exception=frozen[0])
            off_device += [r[-1]["off_device"] for r in runs if r[-1]["off_device"]]
            for step in range(steps):
                with trying(step=step + 1):
                    records = [r[step] for r in runs]
                    _name_what_held_once(records, step, dtype, averaged)
                    worst_diff = max(worst_diff, _judge_step(records, ranks, machines))
            averaged.add(dtype)
    if off_device:
        raise Wrong("off_device", function="average_gradients", collective=off_device[0])
    return Phrase("avg_ok", diff=worst_diff)


def _name_what_held_once(records: list[dict], step: int, dtype: str, averaged: set) -> None:
    """Gradients left as they were where the same answer averaged them before: at a later
    step (it reduced tensors an earlier call left), or in another dtype (a copy it made,
    which p.grad.float() is only when p.grad is not float32 already)."""
    if not all(r["unchanged"] for r in records) or any(r["unwaited"] for r in records):
        return
    if step > 0:
        raise Wrong("avg_stale", step=step + 1)
    if averaged and dtype not in averaged:
        raise Wrong("avg_copy", dtype=dtype, other=and_list(sorted(averaged)))


def _judge_step(records: list[dict], ranks: int, machines: int) -> float:
    """One step on every rank: the largest difference from DDP's, or the Wrong that names it."""
    worst = max(records, key=lambda r: r["diff"])
    if any(r["unwaited"] for r in records):
        raise Wrong("avg_not_waited", count=max(r["unwaited"] for r in records))
    if worst["diff"] <= 1e-6:
        return worst["diff"]
    if all(r["unchanged"] for r in records):
        raise Wrong("avg_unchanged")
    if abs(worst["ratio"] - ranks) < 0.05:
        raise Wrong("avg_sum", ratio=worst["ratio"], ranks=ranks)
    if machines > 1 and abs(worst["ratio"] - machines) < 0.05:
        raise Wrong("avg_local", ranks=ranks, machines=machines, local=ranks // machines)
    raise Wrong("avg_differ", diff=worst["diff"], ranks=ranks, machines=machines)


# On the core path, right before DDP does the same: the average by hand, checked against
# DDP's gradients (moved here from lesson 02's Going further, issue 38).
exercise = Exercise(
    "3.2",
    "average_gradients",
    _check_average,
    average_gradients,
    texts=MESSAGES,
    hints=("avg_divide", "avg_same_calls", "avg_wait", "avg_none", "avg_fresh", "avg_code"),
    mistakes={
        "avg_not_waited": Mistake(hint="avg_wait"),
        "avg_frozen": Mistake(hint="avg_none"),
        "avg_stale": Mistake(hint="avg_fresh"),
        "avg_copy": Mistake(hint="avg_fresh"),
        "avg_sum": Mistake(hint="avg_divide"),
        "avg_unchanged": Mistake(hint="avg_divide"),
        "avg_differ": Mistake(hint="avg_divide"),
        "avg_local": Mistake(hint="avg_divide"),
        "off_device": Mistake(),
        **rank_mistakes(hint="avg_same_calls"),
    },
    hidden=on_hidden_seeds(_check_average),
    space=SPACE,
    hang_timeout=HANG,
)
