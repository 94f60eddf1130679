"""3.4 train_accumulated (Going further): no_sync() for all but the last micro-batch."""

from __future__ import annotations

from ...i18n import messages
from .._core import (
    Exercise,
    Mistake,
    Phrase,
    Wrong,
    process_group,
    run_on_ranks,
    weights_apart,
)
from .common import make_batches, make_model

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
    },
)


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
