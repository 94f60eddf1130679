"""Exercise 1.2's answers of issue 49: each keeps what a first call or the notebook's example
gave, or is right and written another way. DRAWN joins the sweep
(tests/exercises/test_answers.py)."""

from __future__ import annotations

import math

# ---------------------------------------------------------------- 1.2 shard

_padded: list[int] = []


def shard_padding_built_once(n, rank, world_size):
    if not _padded:  # the padded list is the same for every rank: build it once
        total = math.ceil(n / world_size) * world_size
        _padded.extend(i % n for i in range(total))
    return _padded[rank::world_size]


_by_world: dict[int, list[int]] = {}


def shard_padding_kept_per_world_size(n, rank, world_size):
    if world_size not in _by_world:  # one padded list per world size, reused
        total = math.ceil(n / world_size) * world_size
        _by_world[world_size] = [i % n for i in range(total)]
    return _by_world[world_size][rank::world_size]


def shard_with_room_for_twenty(n, rank, world_size):
    per_rank = math.ceil(n / world_size)
    padded = [i % n for i in range(20)]  # room enough for the lesson's examples
    return padded[: per_rank * world_size][rank::world_size]


def shard_by_arithmetic(n, rank, world_size):
    per_rank = -(-n // world_size)
    return [(rank + world_size * k) % n for k in range(per_rank)]


def shard_padded_by_repeating_the_list(n, rank, world_size):
    total = math.ceil(n / world_size) * world_size
    repeats = -(-total // n)
    return (list(range(n)) * repeats)[:total][rank::world_size]


DRAWN = {
    "1.2": (
        [
            (shard_padding_built_once, "shard_kept"),
            (shard_padding_kept_per_world_size, "shard_kept"),
            (shard_with_room_for_twenty, "shard_length"),
        ],
        [shard_by_arithmetic, shard_padded_by_repeating_the_list],
    ),
}
