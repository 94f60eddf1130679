"""Training throughput on 1 and N ranks, and its plot (lesson 03, benchmarks/scaling.py)."""

from __future__ import annotations

import os
import time

from ..i18n import messages
from .pictures import use_fonts

# The lesson's model (8 -> 16 -> 1), and the same shape made wide enough that computing a
# step costs more than averaging its gradients.
# Each model's name is MESSAGES[f"model.{key}"].
MODELS = {"lesson": (16, 1), "wide": (1024, 2)}

# The models' names and the plot's words (the Japanese edition's are in Japanese).
MESSAGES = messages(
    "scaling",
    {
        "model.lesson": "lesson 03's model (16 hidden)",
        "model.wide": "1024 hidden x 2 layers",
        "ideal": "ideal (linear)",
        "xlabel": "ranks (one CPU core each)",
        "ylabel": "speed-up over 1 rank",
        "title": "DDP training throughput, gloo on CPU",
        "speedup": "{speedup:.2f}x",
    },
)


def make_mlp(hidden: int, layers: int):
    """8 inputs -> `layers` hidden layers of `hidden` units (tanh) -> 1 output."""
    import torch

    torch.manual_seed(0)
    mods = [torch.nn.Linear(8, hidden), torch.nn.Tanh()]
    for _ in range(layers - 1):
        mods += [torch.nn.Linear(hidden, hidden), torch.nn.Tanh()]
    return torch.nn.Sequential(*mods, torch.nn.Linear(hidden, 1))


def train_throughput(
    steps: int = 60, batch: int = 512, warmup: int = 5, hidden: int = 16, layers: int = 1
) -> float:
    """Run in every rank: DDP training steps of an MLP; examples/s over all ranks."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    try:
        world = dist.get_world_size()
        model = DDP(make_mlp(hidden, layers))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        gen = torch.Generator().manual_seed(dist.get_rank())
        x, y = torch.randn(batch, 8, generator=gen), torch.randn(batch, 1, generator=gen)
        for step in range(warmup + steps):
            if step == warmup:
                dist.barrier()
                start = time.perf_counter()
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        dist.barrier()
        return steps * batch * world / (time.perf_counter() - start)
    finally:
        dist.destroy_process_group()


def measure_scaling(ranks=(1, 2), repeats: int = 3, **kwargs) -> dict[int, float]:
    """Median examples/s for each number of ranks, one thread per rank, in one run."""
    import statistics

    from ..launcher import launch

    saved = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"  # one core per rank: the comparison is fair
    try:
        return {
            n: statistics.median(
                launch(train_throughput, nprocs=n, timeout=300, **kwargs).rank0
                for _ in range(repeats)
            )
            for n in ranks
        }
    finally:
        if saved is None:
            os.environ.pop("OMP_NUM_THREADS")
        else:
            os.environ["OMP_NUM_THREADS"] = saved


def measure_models(ranks=(1, 2), repeats: int = 3, **kwargs) -> dict[str, dict[int, float]]:
    """measure_scaling for each model of MODELS: {model's name: {ranks: examples/s}}, the
    names in the current language."""
    out = {}
    chosen = kwargs.pop("steps", None)
    for key, (hidden, layers) in MODELS.items():
        name = MESSAGES[f"model.{key}"]
        # A step of the wide model costs ~100x more: fewer steps take about as long (some
        # tenths of a second on one core), so that one pause of a shared machine does not
        # decide the figure (60 steps of the small model, 30 ms, once showed 3.65x on 2 ranks).
        steps = chosen or (600 if hidden < 100 else 10)
        out[name] = measure_scaling(
            ranks, repeats, steps=steps, hidden=hidden, layers=layers, **kwargs
        )
    return out


def plot_scaling(results: dict[str, dict[int, float]]):
    """Speed-up over one rank for each model, against the ideal (linear) line."""
    import matplotlib.pyplot as plt

    use_fonts()
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    ranks = sorted(next(iter(results.values())))
    ax.plot(ranks, ranks, "k--", label=MESSAGES["ideal"])
    for name, result in results.items():
        speedup = [result[n] / result[ranks[0]] for n in ranks]
        ax.plot(ranks, speedup, "o-", label=name)
        ax.annotate(
            MESSAGES["speedup"].format(speedup=speedup[-1]),
            (ranks[-1], speedup[-1]),
            textcoords="offset points",
            xytext=(6, -4),
        )
    ax.set_xlim(min(ranks) - 0.1, max(ranks) + 0.45)  # room for the labels right of the last point
    ax.set_xticks(ranks)
    ax.set_xlabel(MESSAGES["xlabel"])
    ax.set_ylabel(MESSAGES["ylabel"])
    ax.set_ylim(0, max(ranks) + 0.3)
    ax.set_title(MESSAGES["title"])
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    return fig
