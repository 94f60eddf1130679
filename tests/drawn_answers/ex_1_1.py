"""Exercise 1.1's answers of issue 49: each keeps what one layout or a first call gave, or is
right and written another way. DRAWN joins the sweep (tests/exercises/test_answers.py)."""

from __future__ import annotations

import functools
import os

# ---------------------------------------------------------------- 1.1 gpu_for_this_rank

_mine = {}


def gpu_kept_in_a_dict():
    import torch

    if "device" not in _mine:  # "it never changes in a process": looked up once
        _mine["device"] = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    return _mine["device"]


@functools.cache
def gpu_cached():
    return f"cuda:{os.environ['LOCAL_RANK']}"


def gpu_from_rank_modulo_two():
    import torch

    return torch.device("cuda", int(os.environ["RANK"]) % 2)  # 2 GPUs a machine, as shown


def gpu_from_rank_less_two_per_machine():
    rank, machine = int(os.environ["RANK"]), int(os.environ["GROUP_RANK"])
    return f"cuda:{rank - 2 * machine}"


def gpu_counted_within_the_machine():
    import torch

    per_machine = int(os.environ["LOCAL_WORLD_SIZE"])
    first_here = int(os.environ["GROUP_RANK"]) * per_machine
    return torch.device("cuda", int(os.environ["RANK"]) - first_here)


def gpu_as_the_local_number():
    return int(os.getenv("LOCAL_RANK", "0"))


DRAWN = {
    "1.1": (
        [
            (gpu_kept_in_a_dict, "gpu_kept"),
            (gpu_cached, "gpu_kept"),
            (gpu_from_rank_modulo_two, "gpu_node"),
            (gpu_from_rank_less_two_per_machine, "gpu_other"),
        ],
        [gpu_counted_within_the_machine, gpu_as_the_local_number],
    ),
}
