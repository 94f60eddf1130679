"""What an all_reduce costs: measured on N ranks, fitted, plotted (lesson 03, Going further).

The ring all-reduce model: on N ranks, a tensor of S bytes is reduced in 2(N - 1) steps
(a reduce-scatter, then an all-gather), each moving S / N bytes to the next rank, so each
rank sends 2(N - 1)/N x S bytes and a call costs about 2(N - 1) x alpha + 2(N - 1)/N x S / beta,
alpha the latency of one step and beta the bandwidth of one link.
"""

from __future__ import annotations

import time

from ..i18n import messages
from .pictures import use_fonts
from .scaling import make_mlp

# Message sizes from 4 KiB to 16 MiB, by factors of 4.
SIZES = tuple(4096 * 4**k for k in range(7))

MESSAGES = messages(
    "communication",
    {
        "xlabel": "message size (bytes)",
        "ylabel": "all_reduce time (s)",
        "title": "all_reduce on gloo, this machine",
        "measured": "{ranks} ranks, measured",
        "fitted": "{ranks} ranks, ring model fitted",
        "ring_start": "start: each rank its own gradient, in N parts",
        "ring_scatter": "reduce-scatter, step {step}: each rank sends one part to the next",
        "ring_gather": "all-gather, step {step}: each rank passes on a finished part",
        "ring_rank": "rank {rank}",
        "ring_title": (
            "Ring all-reduce on {n} ranks: the number in a part counts the ranks summed in "
            "it; outlined, the part each rank sent in that step"
        ),
        "overlap_title": "MiniDDP, 2 ranks: each bucket's all_reduce while backward goes on",
        "overlap_forward": "forward",
        "overlap_backward": "backward",
        "overlap_reduce": "all_reduce of a bucket",
        "overlap_rank": "rank {rank}",
        "overlap_xlabel": "time in the step (ms)",
        "overlap_line": (
            "rank {rank}: backward, ms: {ms:.0f} (measured); all_reduces done before it "
            "ended: {during} (measured) of {calls}"
        ),
    },
)


def ring_bytes_sent(nbytes: float, world_size: int) -> float:
    """Bytes each rank sends in a ring all-reduce of a tensor of `nbytes` bytes."""
    return 2 * (world_size - 1) / world_size * nbytes


def _time_alone(nbytes: int, repeats: int) -> float:
    """Run in every rank: the median seconds of an all_reduce of `nbytes` bytes, nothing else
    running (each call after a barrier)."""
    import statistics

    import torch
    import torch.distributed as dist

    tensor = torch.ones(nbytes // 4)
    dist.all_reduce(tensor)
    runs = []
    for _ in range(repeats):
        dist.barrier()
        start = time.perf_counter()
        dist.all_reduce(tensor)
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def _time_all_reduce(sizes, repeats: int) -> dict[int, float]:
    """Run in every rank: the median seconds of an all_reduce of each size (float32)."""
    import torch.distributed as dist

    dist.init_process_group("gloo")
    try:
        # Each size's first call connects and warms the buffers; it is not timed.
        return {size: _time_alone(size, repeats) for size in sizes}
    finally:
        dist.destroy_process_group()


def measure_all_reduce(ranks=(2, 4), sizes=SIZES, repeats: int = 15) -> dict[int, dict[int, float]]:
    """{ranks: {bytes: seconds}}: rank 0's median all_reduce time for each size."""
    from ..launcher import launch

    return {n: launch(_time_all_reduce, sizes, repeats, nprocs=n, timeout=300).rank0 for n in ranks}


def fit_ring(times: dict[int, float], world_size: int) -> tuple[float, float]:
    """(alpha in seconds, beta in bytes/s) of the ring model, least squares on `times`."""
    import numpy as np

    steps = 2 * (world_size - 1)
    sizes = np.array(sorted(times), dtype=float)
    seconds = np.array([times[s] for s in sorted(times)])
    design = np.stack([np.full_like(sizes, steps), ring_bytes_sent(sizes, world_size)], axis=1)
    # Relative errors, as the log-log plot shows them: every size weighs alike.
    weights = 1 / seconds
    (alpha, inverse_beta), *_ = np.linalg.lstsq(
        design * weights[:, None], seconds * weights, rcond=None
    )
    return float(alpha), float(1 / inverse_beta)


def ring_time(nbytes: float, world_size: int, alpha: float, beta: float) -> float:
    """The ring model's seconds for one all_reduce of `nbytes` bytes."""
    return 2 * (world_size - 1) * alpha + ring_bytes_sent(nbytes, world_size) / beta


def plot_all_reduce(measured: dict[int, dict[int, float]]):
    """Measured times against size on log axes, with each world size's fitted ring model."""
    import matplotlib.pyplot as plt

    use_fonts()
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    for n, times in measured.items():
        alpha, beta = fit_ring(times, n)
        sizes = sorted(times)
        (line,) = ax.plot(
            sizes, [times[s] for s in sizes], "o", label=MESSAGES["measured"].format(ranks=n)
        )
        ax.plot(
            sizes,
            [ring_time(s, n, alpha, beta) for s in sizes],
            "-",
            color=line.get_color(),
            label=MESSAGES["fitted"].format(ranks=n),
        )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(MESSAGES["xlabel"])
    ax.set_ylabel(MESSAGES["ylabel"])
    ax.set_title(MESSAGES["title"])
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def _time_ddp_step(hidden: int, layers: int, steps: int) -> dict:
    """Run in every rank: each bucket's bytes; the median span of a step's all-reduces (from
    the first bucket handed over to the last one reduced, backward's computation included),
    timed by a comm hook; and each bucket's all_reduce timed alone, afterwards."""
    import statistics

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    try:
        world = dist.get_world_size()
        model = DDP(make_mlp(hidden, layers))
        starts, ends, buckets = [], [], {}

        def timing_hook(_, bucket):
            starts.append(time.perf_counter())
            buckets[bucket.index()] = bucket.buffer().numel() * bucket.buffer().element_size()
            future = dist.all_reduce(bucket.buffer().div_(world), async_op=True).get_future()
            return future.then(lambda f: (ends.append(time.perf_counter()), f.value()[0])[1])

        model.register_comm_hook(None, timing_hook)
        x, y = torch.randn(64, 8), torch.randn(64, 1)
        spans = []
        for step in range(steps + 2):  # two steps first: buckets rebuilt, buffers warm
            starts.clear(), ends.clear()
            torch.nn.functional.mse_loss(model(x), y).backward()
            if step >= 2:
                spans.append(max(ends) - min(starts))
        sizes = [buckets[i] for i in sorted(buckets)]
        return {
            "bucket_bytes": sizes,
            "span": statistics.median(spans),
            "alone": [_time_alone(size, repeats=3 * steps) for size in sizes],
        }
    finally:
        dist.destroy_process_group()


def time_ddp_step(hidden: int = 1024, layers: int = 2, world_size: int = 2, steps: int = 5) -> dict:
    """Rank 0's buckets, the span of a step's all-reduces, and each bucket's all_reduce timed
    alone (see _time_ddp_step)."""
    from ..launcher import launch

    return launch(_time_ddp_step, hidden, layers, steps, nprocs=world_size, timeout=300).rank0


def ring_states(n: int) -> list[tuple[list[list[int]], list[tuple[int, int]]]]:
    """The ring all-reduce on n ranks, state by state: for each rank and part, how many
    ranks' gradients are summed in it, and the (rank, part) each rank sent to reach it."""
    counts = [[1] * n for _ in range(n)]
    states = [([row[:] for row in counts], [])]
    for step in range(n - 1):  # reduce-scatter: rank r sends part r - step, the next adds
        sent = [(r, (r - step) % n) for r in range(n)]
        before = [row[:] for row in counts]
        for r, part in sent:
            counts[(r + 1) % n][part] += before[r][part]
        states.append(([row[:] for row in counts], sent))
    for step in range(n - 1):  # all-gather: rank r passes its finished part r + 1 - step on
        sent = [(r, (r + 1 - step) % n) for r in range(n)]
        before = [row[:] for row in counts]
        for r, part in sent:
            counts[(r + 1) % n][part] = before[r][part]
        states.append(([row[:] for row in counts], sent))
    return states


def draw_ring_all_reduce(n: int = 4):
    """The ring all-reduce's 2(n - 1) steps on n ranks, as a grid of ranks' parts."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    use_fonts()
    states = ring_states(n)
    fig, ax = plt.subplots(figsize=(10.5, 0.7 * len(states) + 0.8))
    cmap = plt.get_cmap("Blues")
    for row, (counts, sent) in enumerate(states):
        y = len(states) - 1 - row
        for r in range(n):
            for part in range(n):
                x = r * (n + 1) + part
                done = counts[r][part]
                ax.add_patch(Rectangle((x, y), 0.9, 0.7, color=cmap(0.15 + 0.75 * done / n)))
                ax.text(
                    x + 0.45,
                    y + 0.35,
                    str(done),
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white" if done > n / 2 else "black",
                )
            for sender, part in sent:
                if sender == r:
                    ax.add_patch(
                        Rectangle(
                            (r * (n + 1) + part, y), 0.9, 0.7, fill=False, lw=2, ec="darkorange"
                        )
                    )
        if row == 0:
            label = MESSAGES["ring_start"]
        elif row < n:
            label = MESSAGES["ring_scatter"].format(step=row)
        else:
            label = MESSAGES["ring_gather"].format(step=row - n + 1)
        ax.text(n * (n + 1) + 0.2, y + 0.35, label, va="center", fontsize=8)
    for r in range(n):
        ax.text(
            r * (n + 1) + n / 2 - 0.05,
            len(states) + 0.1,
            MESSAGES["ring_rank"].format(rank=r),
            ha="center",
            fontsize=9,
        )
    ax.set_xlim(-0.3, n * (n + 1) + 15.5)
    ax.set_ylim(-0.3, len(states) + 0.7)
    ax.set_axis_off()
    ax.set_title(MESSAGES["ring_title"].format(n=n), fontsize=10)
    fig.tight_layout()
    return fig


def plot_overlap(runs: list[dict]):
    """Per rank, forward and backward as bars and each bucket's all_reduce under them."""
    import matplotlib.pyplot as plt

    use_fonts()
    fig, ax = plt.subplots(figsize=(7.5, 0.9 + 1.1 * len(runs)))
    for rank, run in enumerate(runs):
        y = 2 * (len(runs) - 1 - rank)
        forward, backward = run["forward"] * 1e3, run["backward"] * 1e3
        labels = rank == 0
        ax.broken_barh(
            [(0, forward)],
            (y + 1, 0.8),
            color="lightgray",
            label=MESSAGES["overlap_forward"] if labels else None,
        )
        ax.broken_barh(
            [(forward, backward - forward)],
            (y + 1, 0.8),
            color="gray",
            label=MESSAGES["overlap_backward"] if labels else None,
        )
        spans = [(c["start"] * 1e3, (c["end"] - c["start"]) * 1e3) for c in run["calls"]]
        ax.broken_barh(
            spans,
            (y + 0.1, 0.8),
            color="tab:orange",
            edgecolor="white",
            label=MESSAGES["overlap_reduce"] if labels else None,
        )
    ax.set_yticks([2 * (len(runs) - 1 - r) + 1 for r in range(len(runs))])
    ax.set_yticklabels([MESSAGES["overlap_rank"].format(rank=r) for r in range(len(runs))])
    ax.set_xlabel(MESSAGES["overlap_xlabel"])
    ax.set_title(MESSAGES["overlap_title"], fontsize=10)
    ax.legend(fontsize=8, loc="upper left", ncols=3, bbox_to_anchor=(0, -0.35))
    fig.tight_layout()
    return fig


def overlap_summary(runs: list[dict]) -> str:
    """Per rank: how long backward took, and how many all_reduces ended inside it."""
    lines = []
    for rank, run in enumerate(runs):
        during = sum(c["end"] <= run["backward"] for c in run["calls"])
        ms = 1e3 * (run["backward"] - run["forward"])
        lines.append(
            MESSAGES["overlap_line"].format(
                rank=rank, ms=ms, during=during, calls=len(run["calls"])
            )
        )
    return "\n".join(lines)
