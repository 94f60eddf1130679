"""Exercise 3.6, DDP by hand: `MiniDDP(module, bucket_mb)`, checked against torch's DDP.

The learner's class broadcasts rank 0's weights at construction, copies each gradient
(divided by the world size) into its bucket from a hook as backward produces it, starts an
asynchronous all_reduce as soon as a bucket is complete, and in `finish()` waits for them
and writes the averages back. The buckets are DDP's (`buckets_for`): the parameters in
the order backward produces them (for the check's model, which uses its layers in the
order it registers them, the reverse of `module.parameters()`), a bucket closed once it
holds `bucket_mb` MiB, which is how torch 2.13's DDP lays them out from its second step on
when `bucket_cap_mb` is given (the buckets rebuilt in the order the gradients came in the
first; tests/claims/test_claims_ddp.py shows both). The check compares with DDP's
defaults, where the reducer multiplies each gradient by 1 / world size as it copies it.
The check runs the answer and torch's DDP side by side on 2 and 3 ranks, for two bucket
sizes, and compares the gradients bit for bit.
"""

from __future__ import annotations

import inspect
import time

from ...i18n import messages
from ...launcher import launch
from ..kit import Exercise, Listed, Mistake, Phrase, Wrong, process_group, run_on_ranks
from ..space import CHECK_SEED, Space, on_hidden_seeds, trying

MESSAGES = messages(
    "exercises.lesson03.mini_ddp",
    {
        "hint.mini_broadcast": (
            "At construction every rank must start from rank 0's weights: dist.broadcast "
            "each tensor of module.state_dict() from src=0, on every rank."
        ),
        "hint.mini_hook": (
            "The hook gets the parameter once its .grad is complete: copy p.grad.view(-1) "
            "into the bucket's flat buffer at the parameter's offset, multiply it by 1 / world "
            "size (as DDP does), and count the bucket's parameters still missing; when none is, "
            "dist.all_reduce(flat, async_op=True) and keep the work it returns."
        ),
        "hint.mini_finish": (
            "finish(): work.wait() for each all_reduce started, then copy each parameter's "
            "slice of its bucket back into p.grad (view_as(p)), and make the buckets ready "
            "for the next backward (the works forgotten, the counts full again)."
        ),
        "hint.mini_code": (
            "In the hook: flat[offset:offset + n].copy_(p.grad.view(-1)).mul_(1.0 / self.world); "
            "self.missing[i] -= 1; if self.missing[i] == 0: "
            "self.works.append(dist.all_reduce(flat, async_op=True))."
        ),
        "mini_no_broadcast": (
            "After MiniDDP(...) the ranks' weights or buffers differ by up to {diff:.1e}: "
            "each rank kept its own. Broadcast rank 0's at construction, buffers too "
            "(module.state_dict() holds both)."
        ),
        "mini_no_broadcast.title": "no broadcast at construction",
        "mini_sync": (
            "dist.all_reduce was called without async_op=True: each bucket's all_reduce "
            "blocked backward until it was done, so nothing overlapped."
        ),
        "mini_sync.title": "a synchronous all_reduce",
        "mini_never": (
            "{calls} all_reduce call(s) for {buckets} buckets ({mb} MiB): some bucket was "
            "never launched, and its gradients stayed each rank's own."
        ),
        "mini_never.title": "a bucket never launched",
        "mini_twice": (
            "{calls} all_reduce calls for {buckets} buckets ({mb} MiB): a bucket was "
            "all-reduced more than once."
        ),
        "mini_twice.title": "a bucket all-reduced twice",
        "mini_split": (
            "{calls} all_reduce calls for {buckets} buckets ({mb} MiB): a bucket's gradients "
            "were all-reduced in parts, not as its one flat buffer. One all_reduce a bucket."
        ),
        "mini_split.title": "a bucket all-reduced in parts",
        "mini_late": (
            "{late} of {calls} all_reduce calls started after backward() had returned: "
            "launch each bucket from the hook that completes it, while backward goes on."
        ),
        "mini_late.title": "all_reduces started after backward",
        "mini_waited": (
            "A bucket's all_reduce was waited for inside backward(), in the hook that "
            "started it: backward stood still until it was done, so nothing overlapped. "
            "Keep the work it returns and wait in finish()."
        ),
        "mini_waited.title": "an all_reduce waited for in its hook",
        "mini_bunched": (
            "The first bucket's all_reduce started only once the last bucket's gradients "
            "were being computed: every bucket was launched at the end of backward(), so "
            "nothing overlapped. Launch each bucket from the hook that completes it."
        ),
        "mini_bunched.title": "every bucket launched at the end of backward",
        "mini_order": (
            "The buckets all-reduced were not laid out as DDP's: it has {want} values a "
            "bucket (these: {got}), each parameter in the order backward produces it, at the "
            "offset buckets_for gives it. Use those buckets and offsets as they are."
        ),
        "mini_order.title": "parameters laid out in another order",
        "mini_divided": (
            "On {world} ranks the gradients are one rounding off DDP's: they were divided by "
            "the world size, where DDP with its defaults (as the check runs it) multiplies "
            "them by 1 / world size as its C++ reducer copies them into the bucket (x / 3 "
            "and x * (1 / 3) can differ in the last bit). Multiply instead."
        ),
        "mini_divided.title": "divided, not multiplied by 1/world",
        "mini_not_divided": (
            "The gradients are {world} times DDP's: summed over the ranks, not averaged. "
            "Multiply each gradient by 1 / world size before the all_reduce."
        ),
        "mini_not_divided.title": "summed, not divided",
        "mini_grads": (
            "On {world} ranks with {mb} MiB buckets the gradients differ from torch's DDP "
            "by up to {diff:.1e} ({differ} of {total} values not bit for bit equal)."
        ),
        "mini_grads.title": "not DDP's gradients",
        "mini_second_step": (
            "The first backward and finish() gave DDP's gradients, the second (the same "
            "batch, gradients zeroed) did not ({calls} all_reduces for {buckets} buckets): "
            "finish() must leave the object ready for the next step, its counts of the "
            "gradients still missing and its list of works reset."
        ),
        "mini_second_step.title": "right once, not on the next step",
        "mini_accumulate": (
            "After a backward() without zeroing the gradients first (as gradient accumulation "
            "does), finish() gave the average of that backward's gradients alone: the "
            "gradients already in .grad were dropped. backward() adds to p.grad, and DDP "
            "averages p.grad as it then is: copy p.grad itself into the bucket (not the "
            "gradient a tensor hook is handed), and write the average back over it."
        ),
        "mini_accumulate.title": "the gradients already in .grad dropped",
        "mini_local": (
            "On {machines} machines x {local} ranks the gradients are {machines} times DDP's: "
            "they were multiplied by 1 / {local} (the ranks of one machine, LOCAL_WORLD_SIZE), "
            "not by 1 / {world} (dist.get_world_size())."
        ),
        "mini_local.title": "one machine's ranks, not the world size",
        "mini_frozen": (
            "Your code failed on the frozen parameter (requires_grad=False: it gets no "
            "gradient, and DDP leaves it out of its buckets): {error}. Hook, copy and write "
            "back only the parameters of the buckets buckets_for lays out."
        ),
        "mini_frozen.title": "a parameter without a gradient treated as one with",
        "mini_ok": (
            "Bit for bit DDP's gradients on 2 and 3 ranks and on 2 machines x 2 ranks, with "
            "{cases}, a frozen parameter and a buffer in the model; the first all_reduce "
            "started before backward() returned, each bucket reduced once, and the same again "
            "on a second step, and on a third whose gradients added to the second's."
        ),
        "mini_case": "buckets of {mb} MiB ({buckets} of them)",
    },
)

# A learner's Python hooks run slower than DDP's C++ reducer: each launch waits this long.
HANG = 60.0
# The check and the grader's two hidden draws make 9 launches of up to 4 ranks, each with
# torch's DDP beside the answer (about 3.5 s in all here, at rest): their time, with room.
RUN_TIME = 45.0


def mini_model(seed: int = 0):
    """Three linear layers of uneven sizes (4801 parameters, the first layer's bias frozen:
    no gradient, left out of DDP's buckets) and a buffer that shifts the hidden layer (64
    values, seeded like the weights: an answer that broadcasts only the parameters leaves
    the ranks' models apart), seeded."""
    import torch

    class Shift(torch.nn.Module):
        """Adds a buffer (no gradient, not a parameter) to its input."""

        def __init__(self, n: int):
            super().__init__()
            self.register_buffer("shift", torch.randn(n))

        def forward(self, x):
            return x + self.shift

    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 64), torch.nn.Tanh(), Shift(64), torch.nn.Linear(64, 64),
        torch.nn.Tanh(), torch.nn.Linear(64, 1),
    )  # fmt: skip
    model[0].bias.requires_grad_(False)
    return model


def buckets_for(module, bucket_mb):
    """DDP's buckets: [[(parameter, offset), ...], ...], the parameters in backward's order.

    A bucket takes parameters until it holds at least `bucket_mb` MiB; each parameter's
    offset is where its gradient starts in the bucket's flat buffer.
    """
    cap = bucket_mb * 2**20
    buckets, bucket, size = [], [], 0
    for p in reversed([p for p in module.parameters() if p.requires_grad]):
        bucket.append((p, sum(q.numel() for q, _ in bucket)))
        size += p.numel() * p.element_size()
        if size >= cap:
            buckets.append(bucket)
            bucket, size = [], 0
    return buckets + [bucket] if bucket else buckets


class MiniDDP:
    def __init__(self, module, bucket_mb):
        import torch
        import torch.distributed as dist

        self.module, self.world = module, dist.get_world_size()
        self.buckets = buckets_for(module, bucket_mb)  # [[(param, offset), ...], ...]
        self.flats = [torch.zeros(sum(p.numel() for p, _ in b)) for b in self.buckets]
        self.works = []  # the all_reduces started and not yet waited for
        self.missing = [len(b) for b in self.buckets]  # gradients each bucket still awaits
        for tensor in module.state_dict().values():
            dist.broadcast(tensor, src=0)  # rank 0's weights, on every rank
        for i, bucket in enumerate(self.buckets):
            for p, offset in bucket:
                p.register_post_accumulate_grad_hook(self.hook(i, offset))

    def hook(self, i, offset):
        import torch.distributed as dist

        def ready(p):  # torch calls it once p.grad is complete
            flat = self.flats[i]
            flat[offset : offset + p.numel()].copy_(p.grad.view(-1)).mul_(1.0 / self.world)
            self.missing[i] -= 1
            if self.missing[i] == 0:  # the bucket is complete: reduce it, backward goes on
                self.works.append(dist.all_reduce(flat, async_op=True))

        return ready

    def __call__(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def finish(self):
        for pending in self.works:
            pending.wait()
        for bucket, flat in zip(self.buckets, self.flats, strict=True):
            for p, offset in bucket:
                p.grad.copy_(flat[offset : offset + p.numel()].view_as(p))
        self.works = []
        self.missing = [len(b) for b in self.buckets]


def _batch(rank: int, step: int = 0):
    import torch

    gen = torch.Generator().manual_seed(100 + 10 * step + rank)  # each rank its own data
    x = torch.randn(16, 8, generator=gen)
    return x, x.sum(1, keepdim=True).sin()


def _noted_future(real, call: dict):
    """A torch future that completes with `real` and notes when it is first waited for: by
    its own wait(), or by torch.futures.wait_all (watched by _Spy). A real
    torch.futures.Future, so whatever takes one takes it."""
    import torch

    class Noted(torch.futures.Future):
        def wait(self):
            call.setdefault("waited", time.perf_counter())
            return super().wait()

    noted = Noted()
    noted.call = call

    def complete(done) -> None:
        try:
            noted.set_result(done.value())
        except Exception as exc:  # noqa: BLE001 - the all-reduce's own failure, passed on
            noted.set_exception(exc)

    real.then(complete)
    return noted


class _Waited:
    """The work an all_reduce returned, which notes when it or its future is first waited
    for."""

    def __init__(self, real, call: dict):
        self._real, self._call = real, call

    def wait(self, *args, **kwargs):
        self._call.setdefault("waited", time.perf_counter())
        return self._real.wait(*args, **kwargs)

    def get_future(self):
        return _noted_future(self._real.get_future(), self._call)

    def __getattr__(self, name):
        return getattr(self._real, name)


_GATHERS = ("wait_all",)  # torch.futures' way to wait for several futures at once


class _Spy:
    """dist.all_reduce, logged: when each call started, ended and was first waited for
    (the work it returns notes it), its size, async or not."""

    def __init__(self, keep: bool = False):
        import torch.distributed as dist
        import torch.futures

        self.calls, self._real, self._dist, self._keep = [], dist.all_reduce, dist, keep
        dist.all_reduce = self
        self._futures = torch.futures
        self._gathers = {name: getattr(torch.futures, name) for name in _GATHERS}
        for name, real in self._gathers.items():
            setattr(torch.futures, name, self._noting(real))

    @staticmethod
    def _noting(real):
        def gather(futures, *args, **kwargs):
            now = time.perf_counter()
            for future in futures:
                if hasattr(future, "call"):  # a future of ours: waited for, with the others
                    future.call.setdefault("waited", now)
            return real(futures, *args, **kwargs)

        return gather

    def __call__(self, tensor, *args, **kwargs):
        bound = inspect.signature(self._real).bind(tensor, *args, **kwargs)
        call = {"start": time.perf_counter(), "size": tensor.numel(), "end": None}
        call["async"] = bool(bound.arguments.get("async_op", False))
        if self._keep:  # what the rank handed over, before the sum
            call["input"] = tensor.detach().clone()
        self.calls.append(call)
        work = self._real(tensor, *args, **kwargs)
        if work is None:
            call["end"] = time.perf_counter()
            return None
        work.get_future().then(lambda _: call.update(end=time.perf_counter()))
        return _Waited(work, call)

    def restore(self):
        self._dist.all_reduce = self._real
        for name, real in self._gathers.items():
            setattr(self._futures, name, real)


def _divide_hook(world, bucket):
    """DDP's arithmetic with a division where it multiplies by 1/world (as allreduce_hook)."""
    import torch.distributed as dist

    work = dist.all_reduce(bucket.buffer().div_(world), async_op=True)
    return work.get_future().then(lambda f: f.value()[0])


def _ddp_grads(bucket_mb, x, y, divide=False, then=None):
    """torch's DDP: its second step's gradients (the buckets rebuilt after the first); with
    `then` (another batch), also those after a backward on it without zeroing them first
    (accumulated), and after one with them zeroed (fresh)."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(mini_model(0), bucket_cap_mb=bucket_mb)
    if divide:
        model.register_comm_hook(dist.get_world_size(), _divide_hook)
    for _ in range(2):
        model.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
    grads = [[p.grad.clone() for p in _trained(model.module)]]
    for zero in () if then is None else (False, True):
        if zero:
            model.zero_grad()
        torch.nn.functional.mse_loss(model(then[0]), then[1]).backward()
        grads.append([p.grad.clone() for p in _trained(model.module)])
    return grads if then is not None else grads[0]


def _trained(module) -> list:
    """The parameters that get a gradient (the frozen bias has none)."""
    return [p for p in module.parameters() if p.requires_grad]


def _mini_ddp_harness(cls, bucket_mbs):
    """One rank: for each bucket size, torch's DDP and the answer on the same batches: a
    step, a second with the gradients zeroed, and a third without (they accumulate)."""
    import torch.distributed as dist

    with process_group():
        rank, runs = dist.get_rank(), []
        batches = _batch(rank), _batch(rank, step=2)
        for mb in bucket_mbs:
            want, accumulated, fresh = _ddp_grads(mb, *batches[0], then=batches[1])
            # x / world and x * (1 / world) differ only where 1 / world is inexact (3 ranks)
            exact = dist.get_world_size() & (dist.get_world_size() - 1) == 0
            divided = want if exact else _ddp_grads(mb, *batches[0], divide=True)
            module = mini_model(rank)  # each rank its own weights: the broadcast must fix it
            ready = _when_ready(module)  # these hooks run before the answer's
            try:
                run = _answer_steps(cls, module, mb, batches)
            except (RuntimeError, AttributeError, TypeError) as exc:
                if not any(text in str(exc) for text in _FROZEN_TEXTS):
                    raise
                return [{"frozen": f"{type(exc).__name__}: {str(exc).splitlines()[0]}"}]
            last = buckets_for(module, mb)[-1]  # its first gradient: the last bucket begun
            run.update(
                mb=mb, want=want, divided=divided, accumulated=accumulated, fresh=fresh,
                handed=_handed(run.pop("local"), module, mb),
                last_bucket_begun=min(ready[id(p)] for p, _ in last),
            )  # fmt: skip
            runs.append(run)
        return runs


# What torch says where an answer treats the frozen bias as one with a gradient: a hook
# registered on it, or its .grad (None) read.
_FROZEN_TEXTS = ("does not require grad", "doesn't require grad", "NoneType")


def _answer_steps(cls, module, mb, batches) -> dict:
    """The answer on one rank: constructed, then three backward() and finish(): a step, a
    second with the gradients zeroed, a third without (on another batch)."""
    import torch

    (x, y), (x3, y3) = batches
    spy = _Spy(keep=True)
    try:
        mini = cls(module, mb)
        weights = [t.detach().clone() for t in module.state_dict().values()]
        torch.nn.functional.mse_loss(mini(x), y).backward()
        backward_end = time.perf_counter()
        local = {id(p): p.grad.clone() for p in _trained(module)}
        grads = []
        for step_x, step_y, zero in ((None, None, False), (x, y, True), (x3, y3, False)):
            if zero:
                module.zero_grad()
            if step_x is not None:
                torch.nn.functional.mse_loss(mini(step_x), step_y).backward()
            mini.finish()
            grads.append(([p.grad.clone() for p in _trained(module)], len(spy.calls)))
    finally:
        spy.restore()
    calls = spy.calls[: grads[0][1]]
    return {
        "weights": weights, "calls": calls, "backward_end": backward_end, "local": local,
        "got": grads[0][0], "second": grads[1][0], "second_calls": grads[1][1] - grads[0][1],
        "third": grads[2][0], "third_calls": grads[2][1] - grads[1][1],
    }  # fmt: skip


def _handed(local: dict, module, mb) -> list:
    """What DDP hands over for each bucket: its gradients x 1/world."""
    import torch
    import torch.distributed as dist

    world = dist.get_world_size()
    return [
        torch.cat([local[id(p)].view(-1) for p, _ in b]).mul_(1.0 / world)
        for b in buckets_for(module, mb)
    ]


def _when_ready(module) -> dict[int, float]:
    """When each parameter's gradient is complete in the next backward, by id(parameter)."""
    ready: dict[int, float] = {}

    def note(p) -> None:
        ready.setdefault(id(p), time.perf_counter())

    for p in _trained(module):
        p.register_post_accumulate_grad_hook(note)
    return ready


def _max_diff(a, b) -> float:
    return max(((u.double() - v.double()).abs().max().item() for u, v in zip(a, b, strict=True)))


def _judge(run: dict, world: int, machines: int) -> None:
    """Raise the Wrong that names what is off in one rank's run of one bucket size."""
    import torch

    mb, calls = run["mb"], run["calls"]
    if calls and not all(c["async"] for c in calls):
        raise Wrong("mini_sync")
    want_sizes = [sum(p.numel() for p, _ in b) for b in buckets_for(mini_model(0), mb)]
    counts = {"calls": len(calls), "buckets": len(want_sizes), "mb": mb}
    if len(calls) < len(want_sizes):
        raise Wrong("mini_never", **counts)
    if len(calls) > len(want_sizes):
        # Every call a whole bucket's size: a bucket reduced again; a smaller one: in parts.
        twice = all(c["size"] in want_sizes for c in calls)
        raise Wrong("mini_twice" if twice else "mini_split", **counts)
    late = sum(c["start"] >= run["backward_end"] for c in calls)
    if late:
        raise Wrong("mini_late", late=late, calls=len(calls))
    if any(c.get("waited", run["backward_end"]) < run["backward_end"] for c in calls):
        raise Wrong("mini_waited")
    if len(want_sizes) > 1 and calls[0]["start"] > run["last_bucket_begun"]:
        raise Wrong("mini_bunched")
    sizes = [c["size"] for c in calls]
    if sizes != want_sizes:
        raise Wrong("mini_order", got=sizes, want=want_sizes)
    for call, handed in zip(calls, run["handed"], strict=True):
        if not torch.equal(call["input"], handed) and torch.equal(
            call["input"].sort().values, handed.sort().values
        ):  # the same values, in another place: parameters laid out in another order
            raise Wrong("mini_order", got=sizes, want=want_sizes)
    _judge_gradients(run, world, machines)


def _judge_gradients(run: dict, world: int, machines: int) -> None:
    """The gradients of the three steps against DDP's, bit for bit: the Wrong that names
    what is off."""
    import torch

    def same(a, b) -> bool:
        return all(torch.equal(u, v) for u, v in zip(a, b, strict=True))

    got, want, buckets = run["got"], run["want"], len(run["handed"])
    if not same(got, want):
        _judge_apart(got, run, world, machines)
    if not same(run["second"], want) or run["second_calls"] != buckets:
        raise Wrong("mini_second_step", calls=run["second_calls"], buckets=buckets)
    with trying(step=3):
        if same(run["third"], run["accumulated"]) and run["third_calls"] == buckets:
            return
        if same(run["third"], run["fresh"]):
            raise Wrong("mini_accumulate")
        _judge_apart(run["third"], {**run, "want": run["accumulated"]}, world, machines)


def _judge_apart(got: list, run: dict, world: int, machines: int) -> None:
    """Gradients that are not DDP's (run["want"]): how they stand to them."""
    import torch

    want = run["want"]
    if all(torch.equal(g, d) for g, d in zip(got, run["divided"], strict=True)):
        raise Wrong("mini_divided", world=world)
    scale = max(w.abs().max().item() for w in want)
    for times, key in ((world, "mini_not_divided"), (machines, "mini_local")):
        if times > 1 and _max_diff(got, [w * times for w in want]) <= 1e-6 * scale * times:
            local = world // machines
            raise Wrong(key, world=world, machines=machines, local=local)
    differ = sum(int((g != w).sum()) for g, w in zip(got, want, strict=True))
    total = sum(w.numel() for w in want)
    fields = {"world": world, "mb": run["mb"], "diff": _max_diff(got, want)}
    raise Wrong("mini_grads", differ=differ, total=total, **fields)


# (ranks, machines): 2 ranks, 3, and 2 machines x 2 ranks (where LOCAL_WORLD_SIZE is not
# the world size); each run constructs the answer once per bucket size of its draw, in one
# process. The bucket sizes lay the check's model out in 4, 3, 2 and 1 buckets; none is the
# notebook's 4 MiB (its timeline's).
MINI_RUNS = ((2, 1), (3, 1), (4, 2))
BUCKET_MBS = (0.0002, 0.0003, 0.0005, 25.0)
SPACE = Space(
    drawn={
        "world": (2, 3, 4),
        "machines": (1, 2),
        "calls": (2,),
        "steps": (3,),
        "counts": {"bucket_mb": BUCKET_MBS},
        "model": ("frozen", "buffer"),
    },
    why_not={
        "dtypes": "the buckets' flat buffers are the notebook's given code (float32, as DDP's "
        "for a float32 model): a float64 model would try that code, not the answer",
        "lengths": "the answer's buffers are the buckets buckets_for lays out, sized by "
        "bucket_mb (drawn, counts)",
        "device": "the buckets' flat buffers are the notebook's given code, made on the "
        "default device (the CPU, where this Going further exercise runs): the off-device "
        "probe would name that code, not the answer",
    },
    notebook={"bucket_mb": 4.0},
)


def _draws(seed: int) -> list[tuple[int, int, tuple[float, float]]]:
    """(ranks, machines, the two bucket sizes) of each run: check() lays the model out in
    4 and 1 buckets, then 3 and 2, then 4 and 2; other seeds in other pairs."""
    pairs = [(0.0002, 25.0), (0.0003, 0.0005), (0.0002, 0.0005), (0.0003, 25.0)]
    return [
        (ranks, machines, pairs[(i + seed) % len(pairs)])
        for i, (ranks, machines) in enumerate(MINI_RUNS)
    ]


def _check_mini_ddp(cls, seed: int = CHECK_SEED) -> Phrase:
    sizes = set()
    for world, machines, bucket_mbs in _draws(seed):
        with trying(ranks=world, machines=machines):
            ranks = run_on_ranks(
                _mini_ddp_harness, cls, bucket_mbs, nprocs=world, nnodes=machines, timeout=HANG
            )
            frozen = [runs[0]["frozen"] for runs in ranks if "frozen" in runs[0]]
            if frozen:
                raise Wrong("mini_frozen", error=frozen[0])
            for runs in ranks:  # every rank's weights first: the others' depend on them
                for i, run in enumerate(runs):
                    apart = _max_diff(run["weights"], ranks[0][i]["weights"])
                    if not apart == 0.0:
                        raise Wrong("mini_no_broadcast", diff=apart)
            for runs in ranks:
                for run in runs:
                    with trying(call=bucket_mbs.index(run["mb"]) + 1):
                        _judge(run, world, machines)
        sizes |= set(bucket_mbs)
    model = mini_model(0)
    cases = [
        Phrase("mini_case", buckets=len(buckets_for(model, mb)), mb=mb) for mb in sorted(sizes)
    ]
    return Phrase("mini_ok", cases=Listed(cases))


def mini_ddp_timeline(cls=MiniDDP, hidden: int = 1024, layers: int = 6, bucket_mb: float = 4.0):
    """Per rank of 2: when backward ran and each bucket's all_reduce started and ended."""
    return list(launch(_timeline_rank, cls, hidden, layers, bucket_mb, nprocs=2, timeout=120))


def _timeline_rank(cls, hidden, layers, bucket_mb):
    import torch

    with process_group():
        torch.manual_seed(0)
        sizes = [64] + [hidden] * layers + [1]
        parts = [torch.nn.Linear(a, b) for a, b in zip(sizes, sizes[1:], strict=False)]
        mini = cls(torch.nn.Sequential(*parts), bucket_mb)
        x = torch.randn(256, 64)
        for _ in range(2):  # the first step warms up; the second is drawn
            spy = _Spy()
            try:
                start = time.perf_counter()
                loss = mini(x).square().mean()
                forward_end = time.perf_counter()
                loss.backward()
                backward_end = time.perf_counter()
                mini.finish()
                done = time.perf_counter()
            finally:
                spy.restore()
        calls = [
            {"start": c["start"] - start, "end": (c["end"] or done) - start, "size": c["size"]}
            for c in spy.calls
        ]
        return {
            "forward": forward_end - start,
            "backward": backward_end - start,
            "finish": done - start,
            "calls": calls,
        }


exercise = Exercise(
    "3.6",
    "MiniDDP",
    _check_mini_ddp,
    MiniDDP,
    texts=MESSAGES,
    hints=("mini_broadcast", "mini_hook", "mini_finish", "mini_code"),
    mistakes={
        "mini_no_broadcast": Mistake(hint="mini_broadcast"),
        "mini_sync": Mistake(hint="mini_hook"),
        "mini_never": Mistake(hint="mini_hook"),
        "mini_twice": Mistake(hint="mini_finish"),
        "mini_late": Mistake(hint="mini_hook"),
        "mini_waited": Mistake(hint="mini_hook"),
        "mini_split": Mistake(hint="mini_hook"),
        "mini_bunched": Mistake(hint="mini_hook"),
        "mini_order": Mistake(hint="mini_hook"),
        "mini_divided": Mistake(hint="mini_hook"),
        "mini_not_divided": Mistake(hint="mini_hook"),
        "mini_grads": Mistake(hint="mini_finish"),
        "mini_second_step": Mistake(hint="mini_finish"),
        "mini_accumulate": Mistake(hint="mini_hook"),
        "mini_local": Mistake(hint="mini_hook"),
        "mini_frozen": Mistake(hint="mini_hook"),
    },
    hidden=on_hidden_seeds(_check_mini_ddp),
    space=SPACE,
    further=True,
    hang_timeout=HANG,
    run_time=RUN_TIME,
)
