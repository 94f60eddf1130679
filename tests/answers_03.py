"""Learners' answers to lesson 03's Going further exercises, for tests/test_answers.py's sweep.

Each wrong answer is a mistake the check must name; each right one differs from the
reference in how it is written.
"""

from __future__ import annotations

import contextlib
import sys

import cloudpickle
import torch
import torch.nn.functional as F

cloudpickle.register_pickle_by_value(sys.modules[__name__])


# ---------------------------------------------------------------- 3.4 train_accumulated


def accumulate_without_no_sync(model, optimizer, micro_batches, k):
    for i, (x, y) in enumerate(micro_batches):
        (F.mse_loss(model(x), y) / k).backward()  # every backward all-reduces
        if (i + 1) % k == 0:
            optimizer.step()
            optimizer.zero_grad()


def accumulate_without_dividing(model, optimizer, micro_batches, k):
    for i, (x, y) in enumerate(micro_batches):
        last = (i + 1) % k == 0
        with contextlib.nullcontext() if last else model.no_sync():
            F.mse_loss(model(x), y).backward()  # k gradients added up
        if last:
            optimizer.step()
            optimizer.zero_grad()


def accumulate_stepping_every_micro_batch(model, optimizer, micro_batches, k):
    for i, (x, y) in enumerate(micro_batches):
        with contextlib.nullcontext() if (i + 1) % k == 0 else model.no_sync():
            (F.mse_loss(model(x), y) / k).backward()
        optimizer.step()
        optimizer.zero_grad()


def accumulate_syncing_the_first_micro_batch(model, optimizer, micro_batches, k):
    for i, (x, y) in enumerate(micro_batches):
        first = i % k == 0  # the all-reduce comes before the other micro-batches' gradients
        with contextlib.nullcontext() if first else model.no_sync():
            (F.mse_loss(model(x), y) / k).backward()
        if (i + 1) % k == 0:
            optimizer.step()
            optimizer.zero_grad()


def accumulate_without_zeroing(model, optimizer, micro_batches, k):
    for i, (x, y) in enumerate(micro_batches):
        last = (i + 1) % k == 0
        with contextlib.nullcontext() if last else model.no_sync():
            (F.mse_loss(model(x), y) / k).backward()
        if last:
            optimizer.step()  # the next step adds to these gradients


def accumulate_with_two_all_reduces_a_step(model, optimizer, micro_batches, k):
    for i, (x, y) in enumerate(micro_batches):
        synced = (i + 1) % k == 0 or (i + 1) % k == k // 2
        with contextlib.nullcontext() if synced else model.no_sync():
            (F.mse_loss(model(x), y) / k).backward()
        if (i + 1) % k == 0:
            optimizer.step()
            optimizer.zero_grad()


def accumulate_all_then_step_once(model, optimizer, micro_batches, k):
    for i, (x, y) in enumerate(micro_batches):
        with contextlib.nullcontext() if (i + 1) % k == 0 else model.no_sync():
            (F.mse_loss(model(x), y) / k).backward()
    optimizer.step()  # one step for all the micro-batches of every step


def accumulate_in_groups_of_k(model, optimizer, micro_batches, k):
    steps = [micro_batches[i : i + k] for i in range(0, len(micro_batches), k)]
    for step in steps:
        optimizer.zero_grad(set_to_none=True)
        with model.no_sync():
            for x, y in step[:-1]:
                (F.mse_loss(model(x), y) / len(step)).backward()
        x, y = step[-1]
        (F.mse_loss(model(x), y) / len(step)).backward()
        optimizer.step()


def accumulate_with_an_exit_stack(model, optimizer, micro_batches, k):
    for i, (x, y) in enumerate(micro_batches):
        with contextlib.ExitStack() as stack:
            if (i + 1) % k:
                stack.enter_context(model.no_sync())
            loss = torch.nn.functional.mse_loss(model(x), y, reduction="sum") / (len(y) * k)
            loss.backward()
        if not (i + 1) % k:
            optimizer.step()
            optimizer.zero_grad()


SWEEP_3_4 = (
    [
        (accumulate_without_no_sync, "accum_no_sync"),
        (accumulate_without_dividing, "accum_not_divided"),
        (accumulate_stepping_every_micro_batch, "accum_step_each"),
        (accumulate_syncing_the_first_micro_batch, "accum_ranks_differ"),
        (accumulate_without_zeroing, "accum_weights"),
        (accumulate_with_two_all_reduces_a_step, "accum_reduces"),
        (accumulate_all_then_step_once, "accum_steps"),
    ],
    [accumulate_in_groups_of_k, accumulate_with_an_exit_stack],
)
