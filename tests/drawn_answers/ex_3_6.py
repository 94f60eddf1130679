"""Exercise 3.6's answers of issue 49: each holds in one configuration only (every step's
gradients zeroed before its backward, one machine, a model without a frozen parameter, one
MiniDDP per process), or is right and written another way. DRAWN joins the sweep
(tests/exercises/test_answers.py)."""

from __future__ import annotations


class _Learners:
    """A learner's MiniDDP, written out; the ones below change one part of it."""

    def __init__(self, module, bucket_mb):
        import torch
        import torch.distributed as dist

        self.module, self.world = module, self.world_size()
        self.buckets = self.layout(module, bucket_mb)
        self.flats = [torch.zeros(sum(p.numel() for p, _ in b)) for b in self.buckets]
        self.works, self.missing = [], [len(b) for b in self.buckets]
        for tensor in module.state_dict().values():
            dist.broadcast(tensor, src=0)
        self.register()

    def world_size(self):
        import torch.distributed as dist

        return dist.get_world_size()

    def layout(self, module, bucket_mb):
        from ddp_helpers.exercises.lesson03 import buckets_for

        return buckets_for(module, bucket_mb)

    def register(self):
        for i, bucket in enumerate(self.buckets):
            for p, offset in bucket:
                p.register_post_accumulate_grad_hook(self.ready(i, offset))

    def ready(self, i, offset):
        def hook(p):
            self.arrived(i, offset, p, p.grad)

        return hook

    def arrived(self, i, offset, p, grad):
        import torch.distributed as dist

        self.flats[i][offset : offset + p.numel()].copy_(grad.view(-1)).mul_(1.0 / self.world)
        self.missing[i] -= 1
        if self.missing[i] == 0:
            self.works.append(dist.all_reduce(self.flats[i], async_op=True))

    def __call__(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def finish(self):
        for work in self.works:
            work.wait()
        for bucket, flat in zip(self.buckets, self.flats, strict=True):
            for p, offset in bucket:
                p.grad.copy_(flat[offset : offset + p.numel()].view_as(p))
        self.works, self.missing = [], [len(b) for b in self.buckets]


class MiniHookedOnTheIncomingGradient(_Learners):
    """A tensor hook: handed the gradient this backward computed, before .grad has it."""

    def register(self):
        for i, bucket in enumerate(self.buckets):
            for p, offset in bucket:
                p.register_hook(
                    lambda grad, i=i, offset=offset, p=p: self.arrived(i, offset, p, grad)
                )


class MiniWithTheLocalWorldSize(_Learners):
    def world_size(self):
        import os

        return int(os.environ["LOCAL_WORLD_SIZE"])  # the ranks beside this one


class MiniHookingEveryParameter(_Learners):
    def register(self):
        where = {id(p): (i, offset) for i, b in enumerate(self.buckets) for p, offset in b}
        for p in self.module.parameters():  # every parameter reports when its grad is done
            p.register_post_accumulate_grad_hook(lambda p: self.arrived(*where[id(p)], p, p.grad))


class MiniWithTheLayoutWorkedOutOnce(_Learners):
    _layout = None  # the same model every time: lay it out once

    def layout(self, module, bucket_mb):
        if MiniWithTheLayoutWorkedOutOnce._layout is None:
            MiniWithTheLayoutWorkedOutOnce._layout = super().layout(module, bucket_mb)
        return MiniWithTheLayoutWorkedOutOnce._layout


# ---------------------------------------------------------------- right, written otherwise


class MiniWritingBackInCallbacks(_Learners):
    """Each bucket's average written back by its future's callback; finish waits for them."""

    def arrived(self, i, offset, p, grad):
        import torch.distributed as dist

        self.flats[i][offset : offset + p.numel()].copy_(grad.view(-1)).mul_(1.0 / self.world)
        self.missing[i] -= 1
        if self.missing[i] == 0:
            future = dist.all_reduce(self.flats[i], async_op=True).get_future()
            self.works.append(future.then(lambda _, i=i: self.write_back(i)))

    def write_back(self, i):
        for p, offset in self.buckets[i]:
            p.grad.copy_(self.flats[i][offset : offset + p.numel()].view_as(p))

    def finish(self):
        for future in self.works:
            future.wait()
        self.works, self.missing = [], [len(b) for b in self.buckets]


class MiniMultiplyingIntoTheBucket(_Learners):
    """torch.mul(..., out=) straight into the bucket's slice."""

    def arrived(self, i, offset, p, grad):
        import torch
        import torch.distributed as dist

        torch.mul(grad.view(-1), 1.0 / dist.get_world_size(),
                  out=self.flats[i][offset : offset + p.numel()])  # fmt: skip
        self.missing[i] -= 1
        if not self.missing[i]:
            self.works.append(dist.all_reduce(self.flats[i], dist.ReduceOp.SUM, async_op=True))


DRAWN = {
    "3.6": (
        [
            (MiniHookedOnTheIncomingGradient, "mini_accumulate"),
            (MiniWithTheLocalWorldSize, "mini_local"),
            (MiniHookingEveryParameter, "mini_frozen"),
            (MiniWithTheLayoutWorkedOutOnce, "mini_never"),
        ],
        [MiniWritingBackInCallbacks, MiniMultiplyingIntoTheBucket],
    ),
}
