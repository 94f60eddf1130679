"""Learners' answers to Going further's exercises (3.4, 3.5, 3.6, 4.7), for test_answers.py's sweep.

Each wrong answer is a mistake the check must name; each right one differs from the
reference in how it is written.
"""

from __future__ import annotations

import contextlib
import sys

import cloudpickle
import torch
import torch.distributed as dist
import torch.nn.functional as F

cloudpickle.register_pickle_by_value(sys.modules[__name__])


# ---------------------------------------------------------------- 3.4 train_accumulated


def accumulate_without_no_sync(model, optimizer, micro_batches, k):
    for i, (x, y) in enumerate(micro_batches):
        (F.mse_loss(model(x), y) / k).backward()  # every backward all-reduces
        if (i + 1) % k == 0:
            optimizer.step()
            optimizer.zero_grad()


def _accumulate(model, optimizer, micro_batches, every, divisor):
    """The right loop, but stepping every `every` micro-batches and dividing the loss by
    `divisor`: each wrong answer below gets one of them wrong."""
    for i, (x, y) in enumerate(micro_batches):
        last = (i + 1) % every == 0
        with contextlib.nullcontext() if last else model.no_sync():
            (F.mse_loss(model(x), y) / divisor).backward()
        if last:
            optimizer.step()
            optimizer.zero_grad()


def accumulate_without_dividing(model, optimizer, micro_batches, k):
    _accumulate(model, optimizer, micro_batches, k, 1)  # k gradients added up


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


def accumulate_with_no_sync_around_the_backward_only(model, optimizer, micro_batches, k):
    for i, (x, y) in enumerate(micro_batches):
        last = (i + 1) % k == 0
        loss = F.mse_loss(model(x), y) / k  # the forward outside: DDP will all-reduce
        with contextlib.nullcontext() if last else model.no_sync():
            loss.backward()
        if last:
            optimizer.step()
            optimizer.zero_grad()


def accumulate_dividing_by_the_world_size_too(model, optimizer, micro_batches, k):
    world = torch.distributed.get_world_size()
    _accumulate(model, optimizer, micro_batches, k, k * world)  # DDP averages already


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


def accumulate_four_at_a_time(model, optimizer, micro_batches, k):
    _accumulate(model, optimizer, micro_batches, 4, 4)  # k hard-coded: the first run's


def accumulate_dividing_by_four(model, optimizer, micro_batches, k):
    _accumulate(model, optimizer, micro_batches, k, 4)  # the first run's k, hard-coded


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
        (accumulate_without_zeroing, "accum_not_zeroed"),
        (accumulate_with_no_sync_around_the_backward_only, "accum_forward_outside"),
        (accumulate_dividing_by_the_world_size_too, "accum_weights"),
        (accumulate_with_two_all_reduces_a_step, "accum_reduces"),
        (accumulate_all_then_step_once, "accum_steps"),
        (accumulate_four_at_a_time, "accum_steps"),
        (accumulate_dividing_by_four, "accum_weights"),
    ],
    [accumulate_in_groups_of_k, accumulate_with_an_exit_stack],
)


# ---------------------------------------------------------------- 3.5 bytes_sent


def bytes_counting_gradients(params, world_size):
    return 2 * (world_size - 1) / world_size * params


def bytes_of_the_reduce_scatter_only(params, world_size):
    return (world_size - 1) / world_size * 4 * params


def bytes_of_the_whole_tensor_each_way(params, world_size):
    return 2 * 4 * params


def bytes_of_the_whole_tensor_at_every_step(params, world_size):
    return 2 * (world_size - 1) * 4 * params  # not one N-th of it a step


def bytes_of_the_whole_tensor_unless_alone(params, world_size):
    return 0 if world_size == 1 else 2 * 4 * params  # right alone, the whole tensor otherwise


def bytes_sent_to_every_rank(params, world_size):
    return (world_size - 1) * 4 * params


def bytes_of_the_tensor_once(params, world_size):
    return 4 * params


def bytes_step_by_step(params, world_size):
    steps = 2 * (world_size - 1)  # a reduce-scatter, then an all-gather
    return steps * (4 * params / world_size)


def bytes_in_integers(params, world_size):
    return 8 * params * (world_size - 1) // world_size


SWEEP_3_5 = (
    [
        (bytes_counting_gradients, "bytes_no_float"),
        (bytes_of_the_reduce_scatter_only, "bytes_one_pass"),
        (bytes_of_the_whole_tensor_each_way, "bytes_whole_tensor"),
        (bytes_of_the_whole_tensor_at_every_step, "bytes_whole_each_step"),
        (bytes_of_the_whole_tensor_unless_alone, "bytes_whole_tensor"),
        (bytes_sent_to_every_rank, "bytes_to_everyone"),
        (bytes_of_the_tensor_once, "bytes_other"),
    ],
    [bytes_step_by_step, bytes_in_integers],
)


# ---------------------------------------------------------------- 4.7 gather_all


def _lengths(values):
    n = torch.tensor([len(values)], device=values.device)
    lengths = [torch.zeros_like(n) for _ in range(dist.get_world_size())]
    dist.all_gather(lengths, n)
    return [int(k) for k in lengths]


def _padded_parts(values):
    """Every rank's values, padded to the longest and gathered: (parts, lengths)."""
    lengths = _lengths(values)
    padded = values.new_zeros(max(lengths))
    padded[: len(values)] = values
    parts = [torch.zeros_like(padded) for _ in lengths]
    dist.all_gather(parts, padded)
    return parts, lengths


def gather_as_a_list(values):
    parts, lengths = _padded_parts(values)
    return [v for part, n in zip(parts, lengths, strict=True) for v in part[:n].tolist()]


def gather_stacked(values):
    parts, lengths = _padded_parts(values)
    return torch.stack(parts)  # one row per rank, padding and all


def gather_without_padding(values):
    parts = [torch.zeros_like(values) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, values)  # every rank's size assumed to be this rank's
    return torch.cat(parts)


def gather_keeping_the_padding(values):
    parts, _ = _padded_parts(values)
    return torch.cat(parts)


def gather_leaving_out_the_last_rank(values):
    parts, lengths = _padded_parts(values)
    return torch.cat([p[:k] for p, k in zip(parts[:-1], lengths[:-1], strict=True)])


def gather_for_rank_zero_only(values):
    parts, lengths = _padded_parts(values)
    if dist.get_rank() == 0:  # "only rank 0 computes the metric"
        return torch.cat([p[:k] for p, k in zip(parts, lengths, strict=True)])
    return values


def gather_in_reverse(values):
    parts, lengths = _padded_parts(values)
    return torch.cat([p[:k] for p, k in reversed(list(zip(parts, lengths, strict=True)))])


def gather_padded_with_floats(values):
    lengths = _lengths(values)
    padded = torch.zeros(max(lengths))  # float, whatever the values are
    padded[: len(values)] = values
    parts = [torch.zeros_like(padded) for _ in lengths]
    dist.all_gather(parts, padded)
    return torch.cat([p[:k] for p, k in zip(parts, lengths, strict=True)])


def gather_dropping_zeros(values):
    parts, _ = _padded_parts(values)
    gathered = torch.cat(parts)
    return gathered[gathered != 0]  # the padding dropped by its value: a real 0 goes too


def gather_as_objects(values):
    parts = [None] * dist.get_world_size()
    dist.all_gather_object(parts, values.tolist())
    return torch.tensor([v for part in parts for v in part], dtype=values.dtype)


def gather_with_a_mask(values):
    lengths = torch.tensor(_lengths(values), device=values.device)
    padded = torch.zeros(int(lengths.max()), dtype=values.dtype, device=values.device)
    padded[: len(values)] = values
    parts = [torch.empty_like(padded) for _ in range(len(lengths))]
    dist.all_gather(parts, padded)
    keep = torch.arange(int(lengths.max()), device=values.device)[None, :] < lengths[:, None]
    return torch.stack(parts)[keep]


def gather_sizes_on_the_cpu(values):
    n = torch.tensor([len(values)])  # made without device=: the CPU, under nccl too
    lengths = [torch.zeros_like(n) for _ in range(dist.get_world_size())]
    dist.all_gather(lengths, n)
    padded = values.new_zeros(max(int(k) for k in lengths))
    padded[: len(values)] = values
    parts = [torch.zeros_like(padded) for _ in lengths]
    dist.all_gather(parts, padded)
    return torch.cat([p[: int(k)] for p, k in zip(parts, lengths, strict=True)])


def gather_padding_on_the_cpu(values):
    """Wrong under nccl: the sizes exchanged on the values' device, the padded buffer made
    without device= (the CPU)."""
    lengths = _lengths(values)
    padded = torch.zeros(max(lengths), dtype=values.dtype)
    padded[: len(values)] = values
    parts = [torch.zeros_like(padded) for _ in lengths]
    dist.all_gather(parts, padded)
    return torch.cat([p[:n] for p, n in zip(parts, lengths, strict=True)])


def gather_through_as_tensor(values):
    """Right: torch.as_tensor of a tensor keeps it where it is."""
    parts, lengths = _padded_parts(torch.as_tensor(values))
    return torch.cat([p[:n] for p, n in zip(parts, lengths, strict=True)])


SWEEP_4_7 = (
    [
        (gather_without_padding, "gather_sizes"),
        (gather_keeping_the_padding, "gather_padding"),
        (gather_leaving_out_the_last_rank, "gather_count"),
        (gather_for_rank_zero_only, "gather_disagree"),
        (gather_in_reverse, "gather_order"),
        (gather_padded_with_floats, "gather_dtype"),
        (gather_as_a_list, "gather_not_tensor"),
        (gather_stacked, "gather_shape"),
        (gather_dropping_zeros, "gather_count"),
        (gather_sizes_on_the_cpu, "off_device"),
        (gather_padding_on_the_cpu, "off_device"),
    ],
    [gather_as_objects, gather_with_a_mask, gather_through_as_tensor],
)


# ---------------------------------------------------------------- 3.6 MiniDDP


class _Mini:
    """A learner's MiniDDP, written out; the wrong ones below change one part of it."""

    def __init__(self, module, bucket_mb):
        from ddp_helpers.exercises.lesson03 import buckets_for

        self.module, self.world = module, dist.get_world_size()
        self.cap = bucket_mb * 2**20
        self.buckets = buckets_for(module, bucket_mb)
        self.flats = [torch.zeros(sum(p.numel() for p, _ in b)) for b in self.buckets]
        _Mini.reset(self)  # the counts for the first step, whatever a subclass's reset does
        self.broadcast()
        for i, bucket in enumerate(self.buckets):
            for p, offset in self.layout(bucket):
                p.register_post_accumulate_grad_hook(self.hook(i, offset))

    def broadcast(self):
        for tensor in self.module.state_dict().values():
            dist.broadcast(tensor, src=0)

    def layout(self, bucket):
        return bucket

    def scaled(self, grad):
        return grad.view(-1) * (1.0 / self.world)

    def launch(self, i):
        self.works.append(dist.all_reduce(self.flats[i], async_op=True))

    def hook(self, i, offset):
        def ready(p):
            self.flats[i][offset : offset + p.numel()].copy_(self.scaled(p.grad))
            self.missing[i] -= 1
            if self.missing[i] == 0:
                self.launch(i)

        return ready

    def __call__(self, x):
        return self.module(x)

    def finish(self):
        for work in self.works:
            work.wait()
        for i, bucket in enumerate(self.buckets):
            for p, offset in self.layout(bucket):
                self.write_back(p, self.flats[i][offset : offset + p.numel()].view_as(p))
        self.reset()

    def reset(self):
        self.works, self.missing = [], [len(b) for b in self.buckets]

    def write_back(self, p, average):
        p.grad.copy_(average)


class MiniWithoutBroadcast(_Mini):
    def broadcast(self):
        pass  # each rank keeps its own weights


class MiniSynchronous(_Mini):
    def launch(self, i):
        dist.all_reduce(self.flats[i])  # blocks backward until it is done


class MiniWaitingForFullBuckets(_Mini):
    def launch(self, i):
        if self.flats[i].numel() * 4 >= self.cap:  # the last, smaller bucket never is
            super().launch(i)


class MiniReducingAgainInFinish(_Mini):
    def finish(self):
        for i in range(len(self.buckets)):
            self.launch(i)  # the hooks launched them already
        super().finish()


class MiniLaunchingInFinish(_Mini):
    def launch(self, i):
        pass

    def finish(self):
        for i in range(len(self.buckets)):
            super().launch(i)  # async, but only once backward is over
        super().finish()


class MiniBroadcastingParametersOnly(_Mini):
    """Wrong: rank 0's parameters broadcast, its buffers not."""

    def broadcast(self):
        for p in self.module.parameters():
            dist.broadcast(p.data, src=0)


class MiniLaunchingAllButTheFirstInFinish(_Mini):
    """Wrong: the first bucket launched in its hook, every other one only in finish."""

    def launch(self, i):
        if i == 0:
            super().launch(i)

    def finish(self):
        for i in range(1, len(self.buckets)):
            super().launch(i)
        super().finish()


class MiniReducingEachGradient(_Mini):
    def hook(self, i, offset):
        def ready(p):
            part = self.flats[i][offset : offset + p.numel()]
            part.copy_(self.scaled(p.grad))
            self.works.append(dist.all_reduce(part, async_op=True))  # a call per parameter

        return ready


class MiniWaitingInTheHook(_Mini):
    def launch(self, i):
        dist.all_reduce(self.flats[i], async_op=True).wait()  # async in name only


class MiniLaunchingAtTheLastGradient(_Mini):
    def launch(self, i):
        if i == len(self.buckets) - 1:  # the last bucket completes last: launch them all now
            for j in range(len(self.buckets)):
                super().launch(j)


class MiniInForwardOrder(_Mini):
    def layout(self, bucket):
        order = {id(p): n for n, p in enumerate(self.module.parameters())}
        params = sorted((p for p, _ in bucket), key=lambda p: order[id(p)])
        offsets = [sum(q.numel() for q in params[:k]) for k in range(len(params))]
        return list(zip(params, offsets, strict=True))  # module.parameters()'s order


class MiniSummed(_Mini):
    def scaled(self, grad):
        return grad.view(-1)  # the sum of the ranks', not the mean


class MiniDivided(_Mini):
    def scaled(self, grad):
        return grad.view(-1) / self.world  # x / 3 is not always x * (1 / 3)


class MiniAddingToTheGradient(_Mini):
    def write_back(self, p, average):
        p.grad.add_(average)  # the rank's own gradient stays in


class MiniWithCatAndSplit:
    """Right, written another way: gradients kept until the bucket is complete, then one
    torch.cat, and torch.split back."""

    def __init__(self, module, bucket_mb):
        from ddp_helpers.exercises.lesson03 import buckets_for

        self.module = module
        self.buckets = [[p for p, _ in b] for b in buckets_for(module, bucket_mb)]
        self.pending = [{} for _ in self.buckets]
        self.reduced = []
        for tensor in module.state_dict().values():
            dist.broadcast(tensor, 0)
        for i, bucket in enumerate(self.buckets):
            for p in bucket:
                p.register_post_accumulate_grad_hook(lambda p, i=i: self._arrived(i, p))

    def _arrived(self, i, p):
        self.pending[i][id(p)] = p.grad.detach().reshape(-1)
        if len(self.pending[i]) == len(self.buckets[i]):
            grads = [self.pending[i][id(q)] for q in self.buckets[i]]
            flat = torch.cat(grads).mul_(1 / dist.get_world_size())
            work = dist.all_reduce(flat, op=dist.ReduceOp.SUM, async_op=True)
            self.reduced.append((i, flat, work))
            self.pending[i] = {}

    def __call__(self, *args):
        return self.module(*args)

    def finish(self):
        for i, flat, work in self.reduced:
            work.get_future().wait()
            parts = flat.split([p.numel() for p in self.buckets[i]])
            for p, part in zip(self.buckets[i], parts, strict=True):
                p.grad = part.view_as(p).clone()
        self.reduced = []


class MiniNeverReset(_Mini):
    """Wrong: finish() leaves its counts spent: the next backward reduces nothing."""

    def reset(self):
        pass


class MiniWaitingOnTheFutureInTheHook(_Mini):
    """Wrong: the all-reduce's future waited for in the hook that started it."""

    def launch(self, i):
        dist.all_reduce(self.flats[i], async_op=True).get_future().wait()


class MiniWaitingForAllInFinish(_Mini):
    """Right: the futures waited for together, in finish."""

    def launch(self, i):
        self.works.append(dist.all_reduce(self.flats[i], async_op=True).get_future())

    def finish(self):
        torch.futures.wait_all(self.works)
        self.works = []
        super().finish()


class MiniWithPositionalArguments(_Mini):
    """Right: the async flag given by position, and a future waited for."""

    def launch(self, i):
        self.works.append(dist.all_reduce(self.flats[i], dist.ReduceOp.SUM, None, True))

    def finish(self):
        self.works = [work.get_future() for work in self.works]
        super().finish()


SWEEP_3_6 = (
    [
        (MiniWithoutBroadcast, "mini_no_broadcast"),
        (MiniBroadcastingParametersOnly, "mini_no_broadcast"),
        (MiniLaunchingAllButTheFirstInFinish, "mini_late"),
        (MiniSynchronous, "mini_sync"),
        (MiniWaitingForFullBuckets, "mini_never"),
        (MiniReducingAgainInFinish, "mini_twice"),
        (MiniLaunchingInFinish, "mini_late"),
        (MiniWaitingInTheHook, "mini_waited"),
        (MiniWaitingOnTheFutureInTheHook, "mini_waited"),
        (MiniReducingEachGradient, "mini_split"),
        (MiniLaunchingAtTheLastGradient, "mini_bunched"),
        (MiniInForwardOrder, "mini_order"),
        (MiniSummed, "mini_not_divided"),
        (MiniDivided, "mini_divided"),
        (MiniAddingToTheGradient, "mini_grads"),
        (MiniNeverReset, "mini_second_step"),
    ],
    [MiniWithCatAndSplit, MiniWithPositionalArguments, MiniWaitingForAllInFinish],
)
