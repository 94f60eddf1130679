"""1.2 shard: each rank's share of the indices, as DistributedSampler deals them."""

from __future__ import annotations

import math
import random

from ...i18n import messages
from ..kit import (
    Exercise,
    Mistake,
    Phrase,
    Wrong,
    and_list,
    call,
    each_case,
    is_tensor,
    run_answer,
)
from ..space import CHECK_SEED, HIDDEN_SEEDS, Space, on_hidden_seeds

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
        "shard_kept": (
            "shard({n}, {rank}, {w}) returned {got} in one process and {other} in another, "
            "which had called it with other arguments before, in another order: what it "
            "returns depends on an earlier call, not only on its arguments. DistributedSampler "
            "gives {want}; work each share out from n, rank and world_size alone."
        ),
        "shard_kept.title": "depends on an earlier call",
        "shard_ok": (
            "It matches DistributedSampler for {cases} cases (n from 1 to {most}, on {worlds} "
            "ranks), called one after another in 2 processes, in opposite orders."
        ),
    },
)


def _reference_shard(n: int, rank: int, world_size: int) -> list[int]:
    """What DistributedSampler(range(n), world_size, rank, shuffle=False) yields, computed
    without torch (a scorer of lesson 01 then never imports it): the items padded by
    repeating from the start, every world_size-th from rank. Written apart from `shard`,
    the reference, which a graded rank turns into a tripwire (tripwire.in_rank).
    tests/exercises/test_exercises.py holds it equal to torch's sampler on every case the
    check and the grader draw."""
    total = math.ceil(n / world_size) * world_size
    return [i % n for i in range(total)][rank::world_size]


def shard(n, rank, world_size):
    total = math.ceil(n / world_size) * world_size
    padded = [i % n for i in range(total)]  # repeat items from the start to pad
    return padded[rank::world_size]


# The notebook's own example, 10 items on 3 ranks, is never drawn: an answer that reads it
# instead of its argument must fail. check() draws 1 to 5 ranks, the grader's cases 6 to 9.
NOTEBOOK_N = 10
WORLDS = {CHECK_SEED: (1, 2, 3, 4, 5), HIDDEN_SEEDS[0]: (6, 7), HIDDEN_SEEDS[1]: (8, 9)}


def _grid(seed: int) -> list[tuple[int, int]]:
    """(n, world size) of each case for this seed: for each world size, fewer items than
    ranks, one more, and two drawn (one up to 40, one past 60), the notebook's n left out;
    check() begins with 11 items on 3 ranks, a case a learner can picture (padded to 12)."""
    rng = random.Random(f"shard/{seed}")
    grid = [(11, 3)] if seed == CHECK_SEED else []
    for w in WORLDS[seed]:
        ns = {1, max(w - 1, 1), w + 1, rng.randint(9, 40), rng.randint(60, 130)}
        grid += [(n, w) for n in sorted(ns - {NOTEBOOK_N}) if (n, w) not in grid]
    return grid


def _spread(axis) -> tuple[int, ...]:
    seeds = (CHECK_SEED, *HIDDEN_SEEDS)
    return tuple(sorted({axis(n, w) for seed in seeds for n, w in _grid(seed)}))


def _calls(seed: int) -> int:
    return sum(w for _, w in _grid(seed))


SPACE = Space(
    drawn={
        "world": _spread(lambda n, w: w),
        "calls": tuple(_calls(seed) for seed in (CHECK_SEED, *HIDDEN_SEEDS)),
        "counts": {"n": _spread(lambda n, w: n)},
        "lengths": _spread(lambda n, w: math.ceil(n / w)),
    },
    why_not={
        "machines": "shard(n, rank, world_size) is a function of its arguments: no machine "
        "or environment enters it",
        "steps": "no epoch or loop: shuffle=False deals the same shares every time",
        "dtypes": "it makes its indices itself, from three ints: no tensor is handed to it",
        "model": "it is given no model",
        "device": "it is given no tensor: a list of ints is on no device",
    },
    notebook={"n": NOTEBOOK_N},
    world_from="world_size",
)


def _check_shard(fn, seed: int = CHECK_SEED) -> Phrase:
    grid = _grid(seed)
    calls = [(n, rank, w) for n, w in grid for rank in range(w)]
    answers, raised = run_answer(each_case, fn, calls)
    _judge_kept(fn, calls, answers)
    for (n, rank, w), got in zip(calls, answers, strict=False):
        _judge_share(n, rank, w, got)
    if raised is not None:
        run_answer(call, fn, *calls[raised])  # raises again, as the answer does
    worlds = and_list(sorted({w for _, w in grid}))
    return Phrase("shard_ok", cases=len(calls), most=max(n for n, _ in grid), worlds=worlds)


def _judge_kept(fn, calls, answers) -> None:
    """The same calls in another process, in the opposite order: an answer that differs
    there depends on what was called before it."""
    backward, _ = run_answer(each_case, fn, calls[::-1])
    others = {len(calls) - 1 - j: other for j, other in enumerate(backward)}
    for k, got in enumerate(answers):
        other = others.get(k, got)
        if repr(_plain(got)) != repr(_plain(other)):
            want = _reference_shard(*calls[k])
            if _plain(got) == want:  # name the wrong one first
                got, other = other, got
            n, rank, w = calls[k]
            raise Wrong("shard_kept", n=n, rank=rank, w=w, got=got, other=other, want=want)


def _plain(value):
    """A share as a list of ints where it is one (a tensor's too), for comparing."""
    if is_tensor(value):
        value = value.tolist()
    if isinstance(value, (list, tuple)) and all(type(i) is int for i in value):
        return list(value)
    return value


def _judge_share(n: int, rank: int, w: int, got) -> None:
    want = _reference_shard(n, rank, w)
    if not isinstance(got, (list, tuple)):  # what came back is plain data (to_plain)
        raise Wrong("shard_type", n=n, rank=rank, w=w, got=got)
    got = [int(i) for i in got]
    if got == want:
        return
    size = math.ceil(n / w)
    args = dict(n=n, rank=rank, w=w, got=got, want=want, count=len(got), size=size)
    # On 1 rank a share dealt out is one block too: only a block among several is one.
    if w > 1 and len(got) > 1 and got == list(range(got[0], got[0] + len(got))):
        raise Wrong("shard_blocks", **args)
    if len(got) != size:
        raise Wrong("shard_length", **args)
    raise Wrong("shard_other", **args)


exercise = Exercise(
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
        "shard_kept": Mistake(),
    },
    # Sizes and world sizes the learner's check never shows (the grader's extra cases).
    hidden=on_hidden_seeds(_check_shard),
    space=SPACE,
)
