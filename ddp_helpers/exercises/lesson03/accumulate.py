"""3.4 train_accumulated (Going further): no_sync() for all but the last micro-batch."""

from __future__ import annotations

import random

from ...i18n import messages
from ..kit import (
    Exercise,
    Mistake,
    Phrase,
    Wrong,
    and_list,
    process_group,
    run_on_ranks,
    weights_apart,
)
from ..space import CHECK_SEED, Space, on_hidden_seeds, trying

MESSAGES = messages(
    "exercises.lesson03.accumulate",
    {
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
        "hint.accum_none": (
            "A frozen parameter (requires_grad=False) gets no gradient: its .grad stays None. "
            "optimizer.zero_grad() leaves it alone; a loop of your own over the parameters "
            "must skip it."
        ),
        "accum_frozen": (
            "Your code raised {exception} on a parameter whose .grad is None: a frozen "
            "parameter (requires_grad=False) gets no gradient. optimizer.zero_grad() skips "
            "it; a loop of your own over the parameters must too."
        ),
        "accum_frozen.title": "did not skip a parameter without a gradient",
        "accum_not_zeroed": (
            "At step {step} the optimizer stepped with this step's gradients plus the step "
            "before's: the gradients were not zeroed after that step. Zero them after every "
            "optimizer step (optimizer.zero_grad())."
        ),
        "accum_not_zeroed.title": "the gradients never zeroed between steps",
        "accum_lost": (
            "At step {step} the optimizer stepped without the gradients of micro-batch(es) "
            "{lost} of its {k} (the others' were in, each divided by {k}): they were zeroed "
            "after their backward(), or never computed. Zero the gradients after the "
            "optimizer step, never between a step's micro-batches."
        ),
        "accum_lost.title": "a micro-batch's gradients left out of its step",
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
            "At step {step} the optimizer stepped with {k} times the gradient of the step's "
            "mean loss: the {k} micro-batches' gradients were added up, not averaged."
        ),
        "accum_not_divided.title": "the loss not divided by k",
        "accum_weights": (
            "At step {step} the optimizer's update was not that of the step's mean loss (one "
            "process's, on the global batch of micro-batch x k x world size = {rows} rows): "
            "{how}."
        ),
        "accum_how_scaled": (
            "it was {ratio:.3g} times it. Divide each micro-batch's mean loss by k ({k}) and "
            "by nothing else: DDP averages over the ranks itself"
        ),
        "accum_how_apart": "it differs from it by up to {diff:.2e}",
        "accum_weights.title": "not one process's step on the global batch",
        "accum_case": (
            "{ranks} ranks, {steps} steps of {k} micro-batches of {micro} row(s), then "
            "{steps2} steps of {k2} of {micro2} row(s)"
        ),
        "tried_weights": "a model in {v}",
        "tried_rows": "micro-batches of {v} row(s)",
        "tried_micro": "{v} micro-batches a step",
        "accum_ok": (
            "Every optimizer step was one process's on its global batch (max difference "
            "{diff:.1e}), with one all-reduce a step, in float32 and float64, with a frozen "
            "parameter and a buffer in the model, the answer called twice in one process: on "
            "{first}; on {second}."
        ),
    },
)


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


# What a check run draws (_draws): its ranks, the model's dtype, and two calls of the answer
# in one process, each with its own k (micro-batches a step), steps and micro-batch rows,
# none of them the notebook's (k = 4, 3 steps, 2 rows: its prose and its first check).
ACCUM_RANKS, LR = (2, 3), 0.1
# How far a step's update may be from one process's: relative to the largest gradient (or
# absolute where that is below 1); float32's sums in another order differ by about 1e-7.
TOLERANCE = {"float32": 1e-5, "float64": 1e-10}
NOTEBOOK = {"k": 4, "steps": 3, "micro": 2}
COUNTS = {"k": (2, 3, 5), "steps": (2, 4, 5), "micro": (1, 3, 5)}
SPACE = Space(
    drawn={
        "world": ACCUM_RANKS,
        "calls": (2,),
        "steps": COUNTS["steps"],
        "counts": COUNTS,
        "dtypes": ("float32", "float64"),
        "model": ("frozen", "buffer"),
    },
    why_not={
        "machines": "the answer is handed the DDP model, whose all-reduce spans every rank "
        "whichever machine it is on: nothing it does can tell one machine from two",
        "lengths": "the micro-batches are steps x k, both drawn (counts); the answer keeps no "
        "buffer of its own to outgrow",
        "device": "the answer hands no tensor to a collective: DDP's backward all-reduces the "
        "gradients where they are, and the micro-batches come on the model's device",
    },
    notebook=NOTEBOOK,
)


def _draws(seed: int) -> list[tuple[int, str, list[tuple[int, int, int]]]]:
    """(ranks, dtype, [(k, steps, micro) of each call]) of each run: the two calls' k differ."""
    dtypes = SPACE.values("dtypes")
    runs = []
    for i, ranks in enumerate(ACCUM_RANKS):
        draw = random.Random(f"3.4/{seed}/{ranks}")
        ks = draw.sample(COUNTS["k"], 2)
        calls = [(k, draw.choice(COUNTS["steps"]), draw.choice(COUNTS["micro"])) for k in ks]
        runs.append((ranks, dtypes[(i + seed) % len(dtypes)], calls))
    return runs


def _shift(n: int):
    """A module that adds a buffer (no gradient, not a parameter) to its input, seeded."""
    import torch

    class Shift(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("shift", torch.randn(n))

        def forward(self, x):
            return x + self.shift

    return Shift()


def _accum_model(dtype: str):
    """The check's model, seeded: a frozen parameter (the first layer's bias: no gradient)
    and a buffer that shifts the hidden layer, in `dtype`."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 16), _shift(16), torch.nn.Tanh(), torch.nn.Linear(16, 1)
    )
    model[0].bias.requires_grad_(False)
    return model.to(getattr(torch, dtype))


def _global_batches(call: int, world: int, k: int, steps: int, micro: int, dtype: str):
    """Call `call`'s global batches: inputs (steps, rows, 8), targets (steps, rows, 1), with
    rows = micro x k x world."""
    import torch

    gen = torch.Generator().manual_seed(10 + call)
    x = torch.randn(steps, micro * k * world, 8, generator=gen, dtype=torch.float64)
    y = x.sum(-1, keepdim=True).sin() + 0.1 * torch.randn(steps, len(x[0]), 1, generator=gen)
    return x.to(getattr(torch, dtype)), y.to(getattr(torch, dtype))


def _micro_batches(rank: int, world: int, call: int, k: int, steps: int, micro: int, dtype):
    """Rank `rank`'s micro-batches of call `call`: its part of each global batch, in k."""
    x, y = _global_batches(call, world, k, steps, micro, dtype)
    parts = [(xs.chunk(world)[rank], ys.chunk(world)[rank]) for xs, ys in zip(x, y, strict=True)]
    return [m for xs, ys in parts for m in zip(xs.split(micro), ys.split(micro), strict=True)]


def _trained(model) -> list:
    """The parameters that get a gradient (not the frozen one)."""
    return [p for p in model.parameters() if p.requires_grad]


def _flat(tensors):
    """The tensors as one flat float64 vector."""
    import torch

    return torch.cat([t.detach().double().flatten() for t in tensors])


def _accumulation_harness(fn, dtype, calls):
    """On each rank: the answer called once per (k, steps, micro) of `calls` on one DDP model
    and optimizer; each optimizer step's weights before and after, DDP's all-reduces (a
    communication hook that counts them, with DDP's own arithmetic) and no_sync()s counted."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    with process_group():
        rank, world = dist.get_rank(), dist.get_world_size()
        model, seen = DDP(_accum_model(dtype)), {"reduces": 0, "no_syncs": 0, "stepped": []}

        def counting_hook(_, bucket):  # DDP's own arithmetic: divide, then sum
            seen["reduces"] += 1
            future = dist.all_reduce(bucket.buffer().div_(world), async_op=True).get_future()
            return future.then(lambda f: f.value()[0])

        model.register_comm_hook(None, counting_hook)
        optimizer = torch.optim.SGD(model.parameters(), lr=LR)
        _watch(model, optimizer, seen)
        records = []
        for call, (k, steps, micro) in enumerate(calls):
            seen.update(reduces=0, no_syncs=0, stepped=[])
            batches = _micro_batches(rank, world, call, k, steps, micro, dtype)
            try:
                fn(model, optimizer, batches, k)
            except (TypeError, AttributeError) as exc:  # the frozen bias's .grad is None
                if "None" not in str(exc):
                    raise
                return [*records, {"frozen": type(exc).__name__}]
            weights = {n: v.detach().clone() for n, v in model.module.state_dict().items()}
            records.append({**seen, "steps": len(seen["stepped"]), "weights": weights})
        return records


def _watch(model, optimizer, seen: dict) -> None:
    """Count the model's no_sync()s; note each optimizer step's weights before and after."""
    real_step, real_no_sync = optimizer.step, model.no_sync

    def step(*args, **kwargs):
        before = _flat(_trained(model.module))
        out = real_step(*args, **kwargs)
        seen["stepped"].append((before, _flat(_trained(model.module))))
        return out

    def no_sync():
        seen["no_syncs"] += 1
        return real_no_sync()

    optimizer.step, model.no_sync = step, no_sync


def _check_accumulated(fn, seed: int = CHECK_SEED) -> Phrase:
    worst, cases = 0.0, []
    for ranks, dtype, calls in _draws(seed):
        with trying(ranks=ranks, weights=dtype):
            runs = run_on_ranks(_accumulation_harness, fn, dtype, calls, nprocs=ranks)
            frozen = [r[-1]["frozen"] for r in runs if "frozen" in r[-1]]
            if frozen:
                raise Wrong("accum_frozen", exception=frozen[0])
            previous = None  # the step before's update: still in .grad where not zeroed
            for call, (k, steps, micro) in enumerate(calls):
                with trying(call=call + 1, micro=k, steps=steps, rows=micro):
                    records = [run[call] for run in runs]
                    _judge_counts(records, k, steps)
                    shape = (call, ranks, k, steps, micro, dtype)
                    diff, previous = _judge_steps(records[0]["stepped"], shape, previous)
                    worst = max(worst, diff)
            (k, steps, micro), (k2, steps2, micro2) = calls
            cases.append(Phrase("accum_case", ranks=ranks, k=k, steps=steps, micro=micro,
                                k2=k2, steps2=steps2, micro2=micro2))  # fmt: skip
    first, second = cases
    return Phrase("accum_ok", first=first, second=second, diff=worst)


def _judge_counts(records: list[dict], k: int, steps: int) -> None:
    """One call's counts on every rank: optimizer steps, all-reduces, ranks apart."""
    got = records[0]
    counts = {"steps": steps, "k": k}
    if got["steps"] == steps * k:
        raise Wrong("accum_step_each", got=got["steps"], **counts)
    if got["steps"] != steps:
        raise Wrong("accum_steps", got=got["steps"], **counts)
    if got["reduces"] == steps * k:
        key = "accum_forward_outside" if got["no_syncs"] else "accum_no_sync"
        raise Wrong(key, got=got["reduces"], steps=steps)
    apart = max(weights_apart(got["weights"], r["weights"]) for r in records[1:])
    if not apart == 0.0:  # nan included
        raise Wrong("accum_ranks_differ", diff=apart)
    if got["reduces"] != steps:
        raise Wrong("accum_reduces", got=got["reduces"], steps=steps)


def _judge_steps(stepped: list, shape: tuple, previous):
    """Each optimizer step's update against one process's on the step's global batch, at
    the weights it had: the largest difference and the last update, or the Wrong that names
    what the step took instead."""
    call, ranks, k, steps, micro, dtype = shape
    x, y = _global_batches(call, ranks, k, steps, micro, dtype)
    worst = 0.0
    for step, (before, after) in enumerate(stepped):
        update = (before - after) / LR  # the gradient SGD stepped with
        want = _gradients(before, x[step], y[step], dtype, [list(range(len(x[step])))])[0]
        diff = (update - want).abs().max().item()
        if not diff <= TOLERANCE[dtype] * max(1.0, want.abs().max().item()):
            parts = _micro_rows(ranks, k, micro)
            micro_grads = _gradients(before, x[step], y[step], dtype, parts)
            where = {"step": step + 1, "k": k, "rows": ranks * k * micro}
            _name_update(update, micro_grads, previous, diff, where)
        worst, previous = max(worst, diff), update
    return worst, previous


def _gradients(weights, x, y, dtype: str, parts: list[list[int]]) -> list:
    """One process's gradient of the mean loss on each part (rows) of the global batch
    (x, y), at `weights` (the trained parameters, flat)."""
    import torch

    model = _accum_model(dtype)
    with torch.no_grad():
        torch.nn.utils.vector_to_parameters(weights.to(x.dtype), _trained(model))
    grads = []
    for rows in parts:
        model.zero_grad()
        torch.nn.functional.mse_loss(model(x[rows]), y[rows]).backward()
        grads.append(_flat(p.grad for p in _trained(model)))
    return grads


def _micro_rows(world: int, k: int, micro: int) -> list[list[int]]:
    """The rows of a global batch that the ranks' j-th micro-batches hold, for each j."""
    share = micro * k  # each rank's rows: a chunk of the global batch
    return [
        [r * share + j * micro + i for r in range(world) for i in range(micro)] for j in range(k)
    ]


def _name_update(update, micro_grads: list, previous, diff: float, where: dict) -> None:
    """Which gradients the step's update holds, and how much of each (least squares on the
    micro-batches' gradients and the step before's update): the Wrong that names it."""
    import torch

    k, step = where["k"], where["step"]
    columns = [*micro_grads, *([previous] if previous is not None else [])]
    basis = torch.stack(columns, dim=1)
    coeffs = torch.linalg.lstsq(basis, update[:, None]).solution.flatten()
    fits = (basis @ coeffs - update).norm() <= 1e-4 * update.norm()
    each, carried = coeffs[:k].tolist(), coeffs[k].item() if previous is not None else 0.0
    kept = [c for c in each if not _near(c, 0.0, k)]
    if fits and _near(carried, 1.0, k) and all(_near(c, 1 / k, k) for c in each):
        raise Wrong("accum_not_zeroed", step=step)
    if fits and _near(carried, 0.0, k) and kept:
        uniform = all(_near(c, each[0], k) for c in each)
        if uniform and _near(each[0], 1.0, k):
            raise Wrong("accum_not_divided", step=step, k=k)
        if uniform and not _near(each[0], 1 / k, k):
            how = Phrase("accum_how_scaled", ratio=each[0] * k, k=k)
            raise Wrong("accum_weights", step=step, rows=where["rows"], how=how)
        if len(kept) < k and all(_near(c, 1 / k, k) for c in kept):
            lost = [j + 1 for j, c in enumerate(each) if _near(c, 0.0, k)]
            raise Wrong("accum_lost", step=step, lost=and_list(lost), k=k)
    how = Phrase("accum_how_apart", diff=diff)
    raise Wrong("accum_weights", step=step, rows=where["rows"], how=how)


def _near(value: float, target: float, k: int) -> bool:
    """value is target, to a thousandth of a micro-batch's share (1/k)."""
    return abs(value - target) <= 1e-3 / k


# The pace rule applies (8 lines); the exercise is in Going further, outside the estimate.
exercise = Exercise(
    "3.4",
    "train_accumulated",
    _check_accumulated,
    train_accumulated,
    texts=MESSAGES,
    hints=("accum_no_sync", "accum_mean", "accum_step", "accum_none", "accum_code"),
    mistakes={
        "accum_frozen": Mistake(hint="accum_none"),
        "accum_lost": Mistake(hint="accum_step"),
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
    hidden=on_hidden_seeds(_check_accumulated),
    space=SPACE,
    further=True,
)
