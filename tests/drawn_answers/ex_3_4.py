"""Exercise 3.4's answers of issue 49: each holds in one configuration only (3 steps,
micro-batches of 2 rows, one call per process, a model without a frozen parameter), or is
right and written another way. DRAWN joins the sweep (tests/exercises/test_answers.py)."""

from __future__ import annotations

import contextlib

# ---------------------------------------------------------------- 3.4 train_accumulated


def accumulate_zeroing_after_the_first_micro_batch(model, optimizer, micro_batches, k):
    import torch.nn.functional as F

    for i, (x, y) in enumerate(micro_batches):
        last = (i + 1) % k == 0
        with contextlib.nullcontext() if last else model.no_sync():
            (F.mse_loss(model(x), y) / k).backward()
        if i % k == 0:
            optimizer.zero_grad()  # a new step begins: clear what the last one left
        if last:
            optimizer.step()


def accumulate_summed_over_two_rows(model, optimizer, micro_batches, k):
    import torch.nn.functional as F

    for i, (x, y) in enumerate(micro_batches):
        last = (i + 1) % k == 0
        with contextlib.nullcontext() if last else model.no_sync():
            loss = F.mse_loss(model(x), y, reduction="sum") / (2 * k)  # 2 rows a micro-batch
            loss.backward()
        if last:
            optimizer.step()
            optimizer.zero_grad()


def accumulate_three_steps(model, optimizer, micro_batches, k):
    import torch.nn.functional as F

    for step in range(3):  # the check's 3 optimizer steps
        group = micro_batches[step * k : (step + 1) * k]
        for j, (x, y) in enumerate(group):
            with contextlib.nullcontext() if j == len(group) - 1 else model.no_sync():
                (F.mse_loss(model(x), y) / k).backward()
        optimizer.step()
        optimizer.zero_grad()


_setup: dict = {}


def accumulate_with_k_set_up_once(model, optimizer, micro_batches, k):
    import torch.nn.functional as F

    _setup.setdefault("k", k)  # the accumulation factor is the run's: set it up once
    every = _setup["k"]
    for i, (x, y) in enumerate(micro_batches):
        last = (i + 1) % every == 0
        with contextlib.nullcontext() if last else model.no_sync():
            (F.mse_loss(model(x), y) / every).backward()
        if last:
            optimizer.step()
            optimizer.zero_grad()


def accumulate_zeroing_each_gradient_by_hand(model, optimizer, micro_batches, k):
    import torch.nn.functional as F

    for i, (x, y) in enumerate(micro_batches):
        last = (i + 1) % k == 0
        with contextlib.nullcontext() if last else model.no_sync():
            (F.mse_loss(model(x), y) / k).backward()
        if last:
            optimizer.step()
            for p in model.parameters():
                p.grad.zero_()  # keeps the tensors: no new allocation each step


# ---------------------------------------------------------------- right, written otherwise


def accumulate_with_the_learning_rate_divided(model, optimizer, micro_batches, k):
    import torch.nn.functional as F

    rates = [group["lr"] for group in optimizer.param_groups]
    for group in optimizer.param_groups:
        group["lr"] /= k  # k summed gradients, a k-th of the step: SGD takes the mean's
    try:
        for i, (x, y) in enumerate(micro_batches):
            last = (i + 1) % k == 0
            with contextlib.nullcontext() if last else model.no_sync():
                F.mse_loss(model(x), y).backward()
            if last:
                optimizer.step()
                optimizer.zero_grad()
    finally:
        for group, rate in zip(optimizer.param_groups, rates, strict=True):
            group["lr"] = rate


def accumulate_zeroing_before_each_step(model, optimizer, micro_batches, k):
    import torch.nn.functional as F

    for start in range(0, len(micro_batches), k):
        optimizer.zero_grad(set_to_none=False)
        *early, final = micro_batches[start : start + k]
        with model.no_sync():
            for x, y in early:
                F.mse_loss(model(x), y).div(k).backward()
        x, y = final
        F.mse_loss(model(x), y).div(k).backward()
        optimizer.step()


DRAWN = {
    "3.4": (
        [
            (accumulate_zeroing_after_the_first_micro_batch, "accum_lost"),
            (accumulate_summed_over_two_rows, "accum_weights"),
            (accumulate_three_steps, "accum_steps"),
            (accumulate_with_k_set_up_once, "accum_steps"),
            (accumulate_zeroing_each_gradient_by_hand, "accum_frozen"),
        ],
        [accumulate_with_the_learning_rate_divided, accumulate_zeroing_before_each_step],
    ),
}
