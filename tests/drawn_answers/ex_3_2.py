"""Exercise 3.2's answers of issue 49: each hard-codes what one configuration keeps fixed, or
is right and written another way. DRAWN joins the sweep (tests/exercises/test_answers.py)."""

from __future__ import annotations

# ---------------------------------------------------------------- 3.2 average_gradients


def avg_without_skipping_frozen(model):
    import torch.distributed as dist

    for p in model.parameters():  # the frozen bias has no .grad
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()


def avg_async_never_waited(model):
    import torch.distributed as dist

    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, async_op=True)
            p.grad /= dist.get_world_size()


def avg_float_copy_never_written_back(model):
    import torch.distributed as dist

    for p in model.parameters():
        if p.grad is not None:
            g = p.grad.float()  # the gradient itself in float32, a copy in float64
            dist.all_reduce(g)
            g /= dist.get_world_size()


_kept: list = []


def avg_grads_kept_from_the_first_call(model):
    import torch.distributed as dist

    if not _kept:
        _kept.extend(p.grad for p in model.parameters() if p.grad is not None)
    for g in _kept:
        dist.all_reduce(g)
        g /= dist.get_world_size()


def avg_flat_buffer_gathered_off_device(model):
    import torch
    import torch.distributed as dist

    grads = [p.grad for p in model.parameters() if p.grad is not None]
    flat = torch.cat([g.flatten() for g in grads])
    world = dist.get_world_size()
    out = torch.empty(world * flat.numel(), dtype=flat.dtype)  # no device=
    dist.all_gather_single(out, flat)
    mean = out.view(world, -1).mean(0)
    for g in grads:
        g.copy_(mean[: g.numel()].view_as(g))
        mean = mean[g.numel() :]


def avg_with_reduce_op_avg_and_waits(model):
    import torch.distributed as dist

    works = [
        (p.grad, dist.all_reduce(p.grad, op=dist.ReduceOp.SUM, async_op=True))
        for p in model.parameters()
        if p.grad is not None
    ]
    for grad, work in works:
        work.wait()
        grad.div_(dist.get_world_size())


def avg_through_futures(model):
    import torch.distributed as dist

    world = dist.get_world_size()
    for p in model.parameters():
        if p.grad is not None:
            future = dist.all_reduce(p.grad, async_op=True).get_future()
            p.grad.copy_(future.wait()[0] / world)


DRAWN = {
    "3.2": (
        [
            (avg_without_skipping_frozen, "avg_frozen"),
            (avg_async_never_waited, "avg_not_waited"),
            (avg_float_copy_never_written_back, "avg_copy"),
            (avg_grads_kept_from_the_first_call, "avg_stale"),
            (avg_flat_buffer_gathered_off_device, "off_device"),
        ],
        [avg_with_reduce_op_avg_and_waits, avg_through_futures],
    ),
}
