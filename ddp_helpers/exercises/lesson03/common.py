"""What lesson 03's cells and several of its checks share: the set-up, the model, the batches."""

from __future__ import annotations

import os
import warnings

from ...i18n import messages

MESSAGES = messages(
    "exercises.lesson03.common",
    {
        "gpus_idle": (
            "CUDA is available, but this process sees {gpus} GPU(s) for the {ranks} ranks of "
            "its machine (LOCAL_WORLD_SIZE), so setup() chose gloo and this rank works on the "
            "CPU. A scheduler that gives each task one GPU (CUDA_VISIBLE_DEVICES set per rank, "
            "e.g. SLURM's --gpus-per-task=1) does this: every rank then sees one GPU, cuda:0. "
            "Let each task see all of its machine's GPUs, or pin cuda:0 when each rank sees "
            "exactly one."
        ),
    },
)


def warn_if_gpus_idle() -> None:
    """Lesson 03's setup(): warn when CUDA is here but the backend rule still chose gloo."""
    import torch

    if torch.cuda.is_available():
        gpus, ranks = torch.cuda.device_count(), os.environ.get("LOCAL_WORLD_SIZE", "?")
        warnings.warn(MESSAGES["gpus_idle"].format(gpus=gpus, ranks=ranks), stacklevel=2)


def setup():
    """Exercise 2.2's set-up, as lesson 03's cells use it, with the warning above."""
    import torch
    import torch.distributed as dist

    if torch.cuda.device_count() < int(os.environ["LOCAL_WORLD_SIZE"]):  # no GPU per rank
        warn_if_gpus_idle()  # CUDA here, yet too few GPUs seen: say why
        dist.init_process_group("gloo")
        return torch.device("cpu")
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    torch.cuda.set_device(device)  # pin: this process's GPU from now on
    dist.init_process_group("nccl", device_id=device)
    return device


STEPS, BATCH = 20, 8


def make_model():
    """The small regression model of lessons 03 and 04 (seeded, so every run agrees)."""
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def make_batches(steps=STEPS, batch=BATCH):
    """`steps` batches of `batch` rows: inputs (steps, batch, 8) and targets (steps, batch, 1)."""
    import torch

    gen = torch.Generator().manual_seed(1)
    x = torch.randn(steps, batch, 8, generator=gen)
    return x, x.sum(-1, keepdim=True).sin() + 0.1 * torch.randn(steps, batch, 1, generator=gen)
