"""1.2 shard: each rank's share of the indices, as DistributedSampler deals them."""

from __future__ import annotations

import math

from ...i18n import messages
from .._core import (
    Exercise,
    Mistake,
    Phrase,
    Wrong,
    answers_to,
)

MESSAGES = messages(
    "exercises.lesson01.shard",
    {
        "hint.shard_dealt": (
            "DistributedSampler deals items out like cards: rank r gets items r, r + W, "
            "r + 2W, ... where W is the world size. It does not cut the data into blocks."
        ),
        "hint.shard_padding": (
            "Every rank must get the same number of items, ceil(n / W), or the ranks would "
            "run different numbers of steps and wait for each other forever. The sampler "
            "pads the list by repeating items from the start: 10 items on 3 ranks become 12."
        ),
        "hint.shard_code": (
            "Build the padded list [i % n for i in range(total)] with total = ceil(n / W) * "
            "W, then take every W-th item starting at the rank: padded[rank::world_size]."
        ),
        "shard_type": "shard({n}, {rank}, {w}) returned {got!r}; return a list of indices.",
        "shard_type.title": "did not return a list",
        "shard_blocks": (
            "shard({n}, {rank}, {w}) returned {got}, a block of consecutive items. "
            "DistributedSampler gives {want}."
        ),
        "shard_blocks.title": "blocks of consecutive items, not dealt out",
        "shard_length": (
            "shard({n}, {rank}, {w}) returned {count} items but every rank must get "
            "ceil({n} / {w}) = {size}: {want}."
        ),
        "shard_length.title": "shares of different lengths (no padding)",
        "shard_other": (
            "shard({n}, {rank}, {w}) returned {got} but DistributedSampler gives {want}."
        ),
        "shard_other.title": "not DistributedSampler's share",
        "shard_ok": "It matches DistributedSampler for {cases} cases (n up to 17, 1-5 ranks).",
    },
)


def _reference_shard(n: int, rank: int, world_size: int) -> list[int]:
    from torch.utils.data.distributed import DistributedSampler

    sampler = DistributedSampler(range(n), num_replicas=world_size, rank=rank, shuffle=False)
    return list(sampler)


def shard(n, rank, world_size):
    total = math.ceil(n / world_size) * world_size
    padded = [i % n for i in range(total)]  # repeat items from the start to pad
    return padded[rank::world_size]


def _check_shard(fn, grid=None) -> Phrase:
    # The lesson's own example first: its message is the one a learner can picture.
    grid = grid or [(10, 3), (7, 2)] + [
        (n, w) for w in range(1, 6) for n in (1, 2, 3, 5, 12, 16, 17)
    ]
    calls = [(n, rank, w) for n, w in grid for rank in range(w)]
    cases = 0
    for (n, rank, w), got in zip(calls, answers_to(fn, calls), strict=True):
        want = _reference_shard(n, rank, w)
        if not isinstance(got, (list, tuple)):  # what came back is plain data (to_plain)
            raise Wrong("shard_type", n=n, rank=rank, w=w, got=got)
        got = [int(i) for i in got]
        cases += 1
        if got == want:
            continue
        size = math.ceil(n / w)
        args = dict(n=n, rank=rank, w=w, got=got, want=want, count=len(got), size=size)
        if len(got) > 1 and got == list(range(got[0], got[0] + len(got))):
            raise Wrong("shard_blocks", **args)
        if len(got) != size:
            raise Wrong("shard_length", **args)
        raise Wrong("shard_other", **args)
    return Phrase("shard_ok", cases=cases)


def _hidden_shard(fn) -> Phrase:
    # Sizes and world sizes the learner's check never shows (the grader's extra cases).
    return _check_shard(fn, [(n, w) for w in (6, 7, 8) for n in (4, 9, 23, 64, 101)])


q2 = Exercise(
    "1.2",
    "shard",
    _check_shard,
    shard,
    texts=MESSAGES,
    hints=("shard_dealt", "shard_padding", "shard_code"),
    mistakes={
        "shard_type": Mistake(),
        "shard_blocks": Mistake(hint="shard_dealt"),
        "shard_length": Mistake(hint="shard_padding"),
        "shard_other": Mistake(hint="shard_padding"),
    },
    hidden=_hidden_shard,
)
