"""Where each rank's memory goes, and what it sends, under DDP, ZeRO-1 and FSDP2 (lesson 05).

Everything here is measured on real ranks (the course's launcher, gloo), on lesson 05's model
(exercises/lesson05/common.py) made wider and one block deeper, so that its weights, not its
biases, hold the bytes and 2 and 4 ranks each get whole blocks to shard:

- memory_per_rank: after one step of AdamW, the bytes each rank holds in parameters (its
  local shards under FSDP2), gradients and optimizer state (each state tensor's numel x
  element_size), under DDP (fp32, and with bf16 parameters), ZeRO-1 (torch's
  ZeroRedundancyOptimizer around AdamW) and FSDP2 (fully_shard per block, then the root);
- bytes_sent_per_step: the collectives one step of DDP and of FSDP2 calls, each tensor's
  bytes counted as torch hands it over, and what each rank sends for them in a ring.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys

from ..i18n import messages
from .communication import ring_bytes_sent
from .pictures import use_fonts

# The demos' model: lesson 05's, 64 wide and 4 blocks deep (its own is 16 wide, 3 deep).
WIDTH, DEPTH = 64, 4
SCHEMES = ("ddp", "ddp_bf16", "zero1", "fsdp2")  # each one's name: scheme_name(key)
PARTS = ("params", "grads", "state")  # what a rank holds, each MESSAGES[f"part.{key}"]
COLLECTIVES = (  # the torch.distributed calls counted, wherever in torch they are made
    "all_reduce",
    "all_gather_single",
    "all_gather_into_tensor",
    "all_gather",
    "reduce_scatter_single",
    "reduce_scatter_tensor",
    "reduce_scatter",
    "broadcast",
    "_broadcast_coalesced",
)

# Names, the same in every language; the words around them are MESSAGES'.
NAMES = {"ddp": "DDP", "zero1": "ZeRO-1", "fsdp2": "FSDP2", "fsdp": "FSDP2"}
OPS = {
    "all_reduce": "all-reduce",
    "all_gather": "all-gather",
    "reduce_scatter": "reduce-scatter",
    "broadcast": "broadcast",
}

MESSAGES = messages(
    "sharding",
    {
        "scheme.ddp_bf16": "DDP, bf16 parameters",
        "part.params": "parameters",
        "part.grads": "gradients",
        "part.state": "optimizer state",
        "memory_line": (
            "{ranks} ranks, {scheme}, on each rank: parameters {params} KiB, gradients "
            "{grads} KiB, optimizer state {state} KiB (measured); for each parameter of the "
            "model, the fullest rank holds {per_param} bytes (measured)"
        ),
        "range": "{low} to {high}",
        "memory_title": "What each rank holds after one AdamW step (measured)",
        "memory_panel": "{ranks} ranks",
        "memory_ylabel": "KiB a rank",
        "memory_caption": (
            "lesson 05's model, {width} wide, {depth} blocks: {parameters} parameters; "
            "a bar for each rank, 0 to {last}"
        ),
        "phase.forward": "forward",
        "phase.backward": "backward",
        "phase.step": "optimizer step",
        "traffic_calls": (
            "{scheme}, {ranks} ranks, {phase}: {count} x {op}, in all {bytes:,} bytes (measured)"
        ),
        "traffic_ran": (
            "{scheme}, {ranks} ranks, as gloo ran it: {count} x {op}, in all {bytes:,} bytes "
            "(measured)"
        ),
        "traffic_not_ring": (
            "{scheme} also broadcasts its buffers from rank 0 before each forward: {bytes:,} "
            "bytes (measured), left out of the sums below (what a rank sends of a broadcast "
            "depends on its place in it)"
        ),
        "traffic_sent": (
            "{scheme}: counted as rings from the calls above, each rank sends {sent:,.0f} bytes "
            "a step; from the calls gloo ran, {ran:,.0f} bytes"
        ),
        "traffic_predicted": "{scheme}: {sent:,.0f} bytes (predicted) a step",
    },
)


def scheme_name(scheme: str) -> str:
    """What the table and the picture call a scheme ("DDP", "ZeRO-1", ...)."""
    return NAMES[scheme] if scheme in NAMES else MESSAGES[f"scheme.{scheme}"]


# ---------------------------------------------------------------- on each rank


def _local(tensor):
    """The part of a tensor this rank holds: a DTensor's local shard, else the tensor."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def _nbytes(tensor) -> int:
    """Bytes this rank holds of a tensor (its local shard for a DTensor)."""
    local = _local(tensor)
    return local.numel() * local.element_size()


def _held(model, state: dict) -> dict:
    """What this rank holds: bytes of parameters, gradients and optimizer state, and the
    state's bytes by name (exp_avg, exp_avg_sq, step)."""
    params = list(model.parameters())
    by_name: dict[str, int] = {}
    for per_param in state.values():
        for name, value in per_param.items():
            if hasattr(value, "numel"):
                by_name[name] = by_name.get(name, 0) + _nbytes(value)
    return {
        "params": sum(_nbytes(p) for p in params),
        "grads": sum(_nbytes(p.grad) for p in params if p.grad is not None),
        "state": sum(by_name.values()),
        "state_by_name": dict(sorted(by_name.items())),
    }


def _step(model, optimizer, dtype, counter=None) -> None:
    """One training step on this rank's rows of lesson 05's first batch; `counter`, if
    given, learns which phase each collective is called in."""
    import torch
    import torch.distributed as dist

    from ..exercises.lesson05.common import make_batches, my_rows

    rank, world = dist.get_rank(), dist.get_world_size()
    x, y = make_batches(1, 4 * world, dtype=dtype)
    phase = counter.phase if counter is not None else (lambda name: None)
    phase("forward")
    out = model(my_rows(x[0], rank, world))
    loss = torch.nn.functional.mse_loss(out, my_rows(y[0], rank, world))
    phase("backward")
    loss.backward()
    phase("step")
    optimizer.step()
    phase(None)


def _built(scheme: str, width: int, depth: int):
    """(model, optimizer, the state this rank keeps) for one scheme, before any step."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from ..exercises.lesson05.common import make_model

    dtype = torch.bfloat16 if scheme == "ddp_bf16" else None
    model = make_model(width, depth, dtype=dtype)
    if scheme == "fsdp2":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        for block in model.blocks:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        return model, optimizer, lambda: optimizer.state
    model = DDP(model)
    if scheme == "zero1":
        from torch.distributed.optim import ZeroRedundancyOptimizer

        optimizer = ZeroRedundancyOptimizer(
            model.parameters(), optimizer_class=torch.optim.AdamW, lr=1e-3
        )
        return model, optimizer, lambda: optimizer.optim.state  # this rank's shard's state
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return model, optimizer, lambda: optimizer.state


def _measure_memory(width: int, depth: int) -> dict:
    """Run in every rank: what it holds after one step under each scheme."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    try:
        held = {}
        for scheme in SCHEMES:
            model, optimizer, state = _built(scheme, width, depth)
            dtype = torch.bfloat16 if scheme == "ddp_bf16" else None
            _step(model, optimizer, dtype)
            held[scheme] = _held(model, state())
            del model, optimizer
        return held
    finally:
        dist.destroy_process_group()


class _Counter:
    """Counts the collectives torch.distributed is called for, and the bytes of their
    tensors, while installed; `phase` names the part of the step they come in."""

    def __init__(self):
        self.calls: list[dict] = []
        self._phase = None
        self._saved: dict = {}

    def phase(self, name) -> None:
        self._phase = name

    def record(self, op: str, nbytes: int) -> None:
        if self._phase is not None:
            self.calls.append({"op": op, "phase": self._phase, "bytes": int(nbytes)})

    def __enter__(self):
        import torch.distributed as dist

        for name in COLLECTIVES:
            if hasattr(dist, name):
                self._saved[name] = getattr(dist, name)
                setattr(dist, name, self._counting(name, self._saved[name]))
        return self

    def __exit__(self, *exc):
        import torch.distributed as dist

        for name, fn in self._saved.items():
            setattr(dist, name, fn)

    def _counting(self, name: str, fn):
        op = _op_of(name)

        def counted(*args, **kwargs):
            self.record(op, _call_bytes(name, args, kwargs))
            return fn(*args, **kwargs)

        return counted


def _op_of(name: str) -> str:
    """The collective a call makes: all_gather_single -> all_gather."""
    for op in ("all_reduce", "all_gather", "reduce_scatter", "broadcast"):
        if op in name:
            return op
    raise ValueError(name)


def _call_bytes(name: str, args: tuple, kwargs: dict) -> int:
    """The logical size of a collective, in bytes: the whole tensor reduced (all-reduce),
    gathered (all-gather's output), scattered (reduce-scatter's input) or broadcast."""

    def size(value) -> int:
        if isinstance(value, (list, tuple)):
            return sum(size(v) for v in value)
        return value.numel() * value.element_size() if hasattr(value, "numel") else 0

    if name == "_broadcast_coalesced":  # (process group, tensors, buffer size, source)
        return size(args[1])
    if name.startswith("reduce_scatter"):
        return size(kwargs.get("input", args[1] if len(args) > 1 else None))
    return size(args[0] if args else kwargs.get("tensor", kwargs.get("output_tensor")))


def _ring_sent(op: str, nbytes: int, world: int) -> float | None:
    """What each rank sends of a collective of `nbytes` in a ring: 2(N - 1)/N for an
    all-reduce, (N - 1)/N for an all-gather or a reduce-scatter; None for a broadcast, whose
    bytes depend on the rank's place in the algorithm."""
    if op == "all_reduce":
        return ring_bytes_sent(nbytes, world)
    if op in ("all_gather", "reduce_scatter"):
        return (world - 1) / world * nbytes
    return None


@contextlib.contextmanager
def _stderr_quiet():
    """Inside: what this process writes to its stderr (fd 2) is dropped. torch's profiler
    prints a line as it starts and stops (Kineto's "profiler_start"), which no setting
    silences, to every rank's cell."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def _element_size(dtype_name: str) -> int:
    """Bytes of one element of a dtype as the profiler names it ("float", "c10::BFloat16")."""
    import torch

    dtype = getattr(torch, dtype_name.split("::")[-1].lower(), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"the profiler named a dtype this demo does not know: {dtype_name}")
    return torch.tensor([], dtype=dtype).element_size()


def _backend_ops(prof, world: int) -> list[dict]:
    """What the backend itself ran, from the profiler's events ("gloo:all_reduce", ...):
    each op and its logical bytes (an all-gather's event holds this rank's input: its output
    is world times that)."""
    import torch.distributed as dist

    prefix = f"{dist.get_backend()}:"
    ops = []
    for event in sorted(prof.events(), key=lambda e: e.time_range.start):
        if not event.name.startswith(prefix):
            continue
        op = _op_of(event.name.removeprefix(prefix))
        # torch 2.8 (make compat's oldest) records shapes but no dtypes: the demo's tensors
        # there are float32, as the table says.
        dtypes = getattr(event, "input_dtypes", None)
        size = _element_size(dtypes[0]) if dtypes else _element_size("float")
        nbytes = sum(math.prod(shape) for shape in event.input_shapes if shape) * size
        ops.append({"op": op, "bytes": nbytes * (world if op == "all_gather" else 1)})
    return ops


def _count_traffic(width: int, depth: int) -> dict:
    """Run in every rank: one step (the third: the first connects, the second rebuilds DDP's
    buckets) of DDP and of FSDP2: the collectives torch.distributed is called for, and what
    the backend ran for them."""
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.profiler import ProfilerActivity, profile

    dist.init_process_group("gloo")
    try:
        found = {}
        for scheme, key in (("ddp", "ddp"), ("fsdp2", "fsdp")):
            model, optimizer, _ = _built(scheme, width, depth)
            if scheme == "ddp":
                # DDP's reducer calls all_reduce from C++: torch's own all-reduce hook makes
                # the same call for each bucket from Python, where it is counted.
                model.register_comm_hook(None, default_hooks.allreduce_hook)
            with _Counter() as counter:
                for _ in range(2):
                    _step(model, optimizer, None)
                    optimizer.zero_grad()
                with (
                    _stderr_quiet(),
                    profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof,
                ):
                    _step(model, optimizer, None, counter)
            found[key] = {
                "calls": counter.calls,
                "backend": _backend_ops(prof, dist.get_world_size()),
            }
            del model, optimizer
        return found
    finally:
        dist.destroy_process_group()


# ---------------------------------------------------------------- in the notebook


def parameter_count(width: int = WIDTH, depth: int = DEPTH) -> dict:
    """{"parameters": all of the model's, "trainable": those with gradients} (the head's
    bias is frozen), counted on the model."""
    from ..exercises.lesson05.common import make_model

    params = list(make_model(width, depth).parameters())
    return {
        "parameters": sum(p.numel() for p in params),
        "trainable": sum(p.numel() for p in params if p.requires_grad),
    }


def memory_per_rank(world_sizes=(2, 4), width: int = WIDTH, depth: int = DEPTH) -> dict:
    """What each rank holds after one AdamW step (its gradients still there, as before
    zero_grad), measured on real ranks, under each of SCHEMES:
    {"parameters", "trainable", "width", "depth", "by_world": {world size: {scheme: [per rank
    {"params", "grads", "state" (bytes), "state_by_name": {name: bytes}}]}}}."""
    from ..launcher import launch

    by_world = {}
    for n in world_sizes:
        ranks = launch(_measure_memory, width, depth, nprocs=n, timeout=120)
        by_world[n] = {scheme: [held[scheme] for held in ranks] for scheme in SCHEMES}
    return {**parameter_count(width, depth), "width": width, "depth": depth, "by_world": by_world}


def _kib(values) -> str:
    """'66.5' or '33.0 to 41.2': KiB, one figure if every rank holds the same."""
    low, high = min(values) / 1024, max(values) / 1024
    if f"{low:.1f}" == f"{high:.1f}":
        return f"{low:.1f}"
    return MESSAGES["range"].format(low=f"{low:.1f}", high=f"{high:.1f}")


def memory_table(measured: dict) -> str:
    """One line per world size and scheme: each part's KiB a rank (a range where ranks
    differ), and bytes a parameter on the rank that holds most."""
    lines = []
    for n, schemes in measured["by_world"].items():
        for scheme, ranks in schemes.items():
            most = max(sum(r[part] for part in PARTS) for r in ranks)
            parts = {part: _kib([r[part] for r in ranks]) for part in PARTS}
            lines.append(
                MESSAGES["memory_line"].format(
                    ranks=n,
                    scheme=scheme_name(scheme),
                    per_param=f"{most / measured['parameters']:.1f}",
                    **parts,
                )
            )
    return "\n".join(lines)


def plot_memory(measured: dict):
    """Stacked bars, one per rank in each scheme, one panel per world size: the KiB of
    parameters, gradients and optimizer state each rank holds."""
    import matplotlib.pyplot as plt

    use_fonts()
    worlds = list(measured["by_world"])
    # Panels as wide as their bars, but room under each group for its scheme's name.
    widths = [len(SCHEMES) * (max(n, 3) + 1) for n in worlds]
    fig, axes = plt.subplots(
        1, len(worlds), figsize=(12, 3.8), sharey=True, gridspec_kw={"width_ratios": widths}
    )
    axes = list(axes) if len(worlds) > 1 else [axes]
    colors = {"params": "#4a6fa5", "grads": "#76b900", "state": "#c2410c"}
    for ax, n in zip(axes, worlds, strict=True):
        schemes = measured["by_world"][n]
        xs, ticks = [], []
        for s, scheme in enumerate(SCHEMES):
            xs += [s * (n + 1) + r for r in range(n)]
            ticks.append((s * (n + 1) + (n - 1) / 2, scheme_name(scheme)))
        bottoms = [0.0] * len(xs)
        for part in PARTS:
            heights = [r[part] / 1024 for scheme in SCHEMES for r in schemes[scheme]]
            ax.bar(
                xs, heights, bottom=bottoms, width=0.8, color=colors[part],
                label=MESSAGES[f"part.{part}"],
            )  # fmt: skip
            bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
        for x, r in zip(xs, [r for _ in SCHEMES for r in range(n)], strict=True):
            ax.text(x, -0.02, str(r), ha="center", va="top",
                    fontsize=6.5, transform=ax.get_xaxis_transform())  # fmt: skip
        ax.set_xticks([t for t, _ in ticks], [label for _, label in ticks], fontsize=8)
        ax.tick_params(axis="x", length=0, pad=12)
        ax.set_title(MESSAGES["memory_panel"].format(ranks=n), fontsize=9)
    axes[0].set_ylabel(MESSAGES["memory_ylabel"])
    axes[0].legend(fontsize=8)
    caption = MESSAGES["memory_caption"].format(
        width=measured["width"],
        depth=measured["depth"],
        parameters=f"{measured['parameters']:,}",
        last=max(worlds) - 1,
    )
    fig.suptitle(MESSAGES["memory_title"], fontsize=10)
    fig.text(0.5, 0.01, caption, ha="center", fontsize=8)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig


def bytes_sent_per_step(world_size: int = 2, width: int = WIDTH, depth: int = DEPTH) -> dict:
    """What one training step sends, DDP against FSDP2, measured on `world_size` ranks (gloo):
    {"world_size", "parameters", "trainable",
     "calls": {"ddp": [...], "fsdp": [...]}: the collectives each called, in order, each
       {"op", "phase", "bytes" (its whole tensor's), "sent" (each rank's in a ring; None for
       a broadcast, whose bytes depend on the rank)},
     "ran": {"ddp": [...], "fsdp": [...]}: what gloo ran for them, each {"op", "bytes", "sent"},
     "sent": {"ddp": bytes, "fsdp": bytes}: each rank's, the calls in a ring (5.3's model),
     "sent_as_run": {"ddp": bytes, "fsdp": bytes}: each rank's, what gloo ran in a ring}."""
    from ..launcher import launch

    counted = launch(_count_traffic, width, depth, nprocs=world_size, timeout=120).rank0
    out = {"world_size": world_size, **parameter_count(width, depth)}
    for part, total in (("calls", "sent"), ("ran", "sent_as_run")):
        source = "calls" if part == "calls" else "backend"
        out[part] = {
            key: [{**c, "sent": _ring_sent(c["op"], c["bytes"], world_size)} for c in found[source]]
            for key, found in counted.items()
        }
        out[total] = {
            key: sum(c["sent"] for c in ops if c["sent"] is not None)
            for key, ops in out[part].items()
        }
    return out


def _grouped(ops: list[dict], by: tuple[str, ...]) -> dict[tuple, list[int]]:
    """The bytes of each op sent in a ring, grouped by the keys `by`, in order of first use."""
    groups: dict[tuple, list[int]] = {}
    for c in ops:
        if c["sent"] is not None:
            groups.setdefault(tuple(c[k] for k in by), []).append(c["bytes"])
    return groups


def traffic_table(traffic: dict, predicted: dict | None = None) -> str:
    """The collectives of a step by scheme, phase and kind, what gloo ran for them, and what
    each rank sends, beside a prediction ({"ddp": bytes, "fsdp": bytes}) if one is given."""
    n, lines = traffic["world_size"], []
    for key, calls in traffic["calls"].items():
        name = NAMES[key]
        for (phase, op), sizes in _grouped(calls, ("phase", "op")).items():
            phase, op = MESSAGES[f"phase.{phase}"], OPS[op]
            lines.append(
                MESSAGES["traffic_calls"].format(
                    scheme=name, ranks=n, phase=phase, count=len(sizes), op=op, bytes=sum(sizes)
                )
            )
        for (op,), sizes in _grouped(traffic["ran"][key], ("op",)).items():
            op = OPS[op]
            lines.append(
                MESSAGES["traffic_ran"].format(
                    scheme=name, ranks=n, count=len(sizes), op=op, bytes=sum(sizes)
                )
            )
        broadcast = sum(c["bytes"] for c in calls if c["sent"] is None)
        if broadcast:
            lines.append(MESSAGES["traffic_not_ring"].format(scheme=name, bytes=broadcast))
    for key in traffic["sent"]:
        sent, ran = traffic["sent"][key], traffic["sent_as_run"][key]
        lines.append(MESSAGES["traffic_sent"].format(scheme=NAMES[key], sent=sent, ran=ran))
        if predicted is not None:
            lines.append(
                MESSAGES["traffic_predicted"].format(scheme=NAMES[key], sent=predicted[key])
            )
    return "\n".join(lines)
