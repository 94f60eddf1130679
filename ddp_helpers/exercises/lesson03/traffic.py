"""3.5 bytes_sent (Going further): what a ring all_reduce sends per rank."""

from __future__ import annotations

import math
import random

from ...i18n import messages
from ..kit import (
    Exercise,
    Listed,
    Mistake,
    Phrase,
    Wrong,
    and_list,
    answers_to,
)
from ..space import CHECK_SEED, HIDDEN_SEEDS, Space, on_hidden_seeds

MESSAGES = messages(
    "exercises.lesson03.traffic",
    {
        "hint.bytes_ring": (
            "A ring all-reduce is a reduce-scatter (N - 1 steps) then an all-gather (N - 1 "
            "steps); in each step every rank sends one N-th of the tensor to its neighbour."
        ),
        "hint.bytes_size": "A float32 gradient takes 4 bytes: the tensor is 4 x params bytes.",
        "hint.bytes_formula": "2 x (world_size - 1) / world_size x 4 x params.",
        "bytes_no_float": ("{got:.0f} bytes counts gradients, not bytes: each float32 takes 4."),
        "bytes_no_float.title": "params, not bytes",
        "bytes_one_pass": (
            "{got:.0f} bytes is one pass around the ring, the reduce-scatter; the all-gather "
            "that follows sends as much again."
        ),
        "bytes_one_pass.title": "the reduce-scatter only",
        "bytes_whole_tensor": (
            "{got:.0f} bytes sends the whole tensor twice; in a ring each step sends one N-th "
            "of it, 2(N - 1) steps in all."
        ),
        "bytes_whole_tensor.title": "the whole tensor at each step",
        "bytes_whole_each_step": (
            "{got:.0f} bytes sends the whole tensor at each of the 2(N - 1) steps; in a ring "
            "each step sends one N-th of it."
        ),
        "bytes_whole_each_step.title": "the whole tensor at each of the 2(N - 1) steps",
        "bytes_to_everyone": (
            "{got:.0f} bytes sends every other rank the whole tensor, as a naive exchange "
            "would; the ring sends less than twice the tensor, whatever N."
        ),
        "bytes_to_everyone.title": "every rank sent the whole tensor",
        "bytes_powers_of_two": (
            "{got!r} is not it, for {params} parameters on {world} ranks, though it is right "
            "on {powers} ranks: a ring takes N - 1 steps each way for any N, not only where "
            "N is a power of two, and each step sends one N-th of the tensor."
        ),
        "bytes_powers_of_two.title": "right only where the ranks are a power of two",
        "bytes_other": "{got!r} is not it, for {params} parameters on {world} ranks.",
        "bytes_other.title": "another number",
        "bytes_ok": (
            "2(N - 1)/N x 4 x params: {cases}. It tends to twice the gradients' bytes, "
            "whatever the number of ranks."
        ),
        "bytes_case": "{bytes:.0f} bytes for {params} parameters on {world} ranks",
    },
)


def bytes_sent(params, world_size):
    return 2 * (world_size - 1) / world_size * 4 * params


def _ring_bytes(params: int, world: int) -> float:
    return 2 * (world - 1) / world * 4 * params


# The lesson's wide model (1,059,841 parameters) is never drawn: an answer that reads the
# notebook's count instead of its argument must fail.
NOTEBOOK_PARAMS = 1_059_841
# World sizes by seed: powers of two and others (3, 5, 6, ...: a formula that holds only
# for powers of two fails), and one rank, which sends nothing.
WORLDS = {
    CHECK_SEED: (2, 3, 4, 5, 6, 8, 1),
    HIDDEN_SEEDS[0]: (7, 2, 12, 16, 3),
    HIDDEN_SEEDS[1]: (10, 4, 9, 32, 6),
}


def _cases(seed: int) -> list[tuple[int, int]]:
    """(params, world size) of each case: check() begins with 1,000,000 parameters on 2 and 3
    ranks; the others' counts are drawn, a million or so, or a few hundred (no N-th of them
    a whole number)."""
    rng = random.Random(f"bytes/{seed}")
    cases = []
    for k, world in enumerate(WORLDS[seed]):
        if seed == CHECK_SEED and k < 2:
            params = 1_000_000
        else:
            params = rng.choice([rng.randint(100, 999), rng.randint(10_000, 5_000_000)])
        cases.append((params if params != NOTEBOOK_PARAMS else params + 1, world))
    return cases


SPACE = Space(
    drawn={
        "world": tuple(sorted({w for ws in WORLDS.values() for w in ws})),
        "calls": tuple(len(WORLDS[seed]) for seed in WORLDS),
        "counts": {"params": tuple(sorted({p for seed in WORLDS for p, _ in _cases(seed)}))},
    },
    why_not={
        "machines": "the exercise's ring has one link a rank, whichever machine it is on: "
        "the bytes depend on the ranks alone",
        "steps": "one all-reduce, no loop",
        "dtypes": "the question is about float32 gradients (4 bytes each): "
        "bytes_sent(params, world_size) takes no dtype",
        "model": "it is given a count of parameters, not a model",
        "lengths": "it is given counts, not data: the parameter counts are drawn as counts",
        "device": "it is given no tensor",
    },
    notebook={"params": NOTEBOOK_PARAMS},
    world_from="world_size",
)


def _right(got, params: int, world: int) -> bool:
    """The ring's bytes: 2(N - 1)/N x 4 x params, or what a ring of whole chunks sends (a
    rank sends every chunk but one each way: the ceil or the floor of params / N left out)."""
    if not isinstance(got, (int, float)):
        return False
    low = 8 * (params - math.ceil(params / world))
    high = 8 * (params - params // world)
    return low - 1e-6 <= got <= high + 1e-6 or _close(got, _ring_bytes(params, world))


# What other formulas give, each a mistake of its own: named only when the answer gives
# that formula's number in every case (at 2 ranks several coincide: 4P is the right one).
BYTES_WRONG = {
    "bytes_no_float": lambda p, w: _ring_bytes(p, w) / 4,
    "bytes_one_pass": lambda p, w: _ring_bytes(p, w) / 2,
    "bytes_whole_tensor": lambda p, w: 2 * 4 * p,
    "bytes_whole_each_step": lambda p, w: 2 * (w - 1) * 4 * p,
    "bytes_to_everyone": lambda p, w: (w - 1) * 4 * p,
}


def _close(got, value) -> bool:
    """Equal, but for rounding (to a whole byte, or a float's)."""
    return isinstance(got, (int, float)) and abs(got - value) <= max(1e-6 * value, 1.0)


def _check_bytes(fn, seed: int = CHECK_SEED) -> Phrase:
    cases = _cases(seed)
    answers = list(answers_to(fn, cases))
    for (params, world), got in zip(cases, answers, strict=True):
        if not _right(got, params, world):
            _judge_wrong(cases, answers, got, params, world)
    shown = [Phrase("bytes_case", world=w, params=p, bytes=_ring_bytes(p, w)) for p, w in cases[:2]]
    return Phrase("bytes_ok", cases=Listed(shown))


def _judge_wrong(cases, answers, got, params: int, world: int) -> None:
    """The Wrong for an answer wrong on (params, world): a formula of its own, one right only
    for powers of two, or another number."""
    # One rank sends nothing: an answer may say so apart from its formula, so the formulas
    # are matched on the cases with several ranks.
    several = [(case, a) for case, a in zip(cases, answers, strict=True) if case[1] > 1]
    for key, formula in BYTES_WRONG.items():
        if all(_close(a, formula(p, w)) for (p, w), a in several):
            raise Wrong(key, got=got)
    powers = [(case, a) for case, a in several if case[1] & (case[1] - 1) == 0]
    if powers and all(_right(a, *case) for case, a in powers):
        worlds = and_list(sorted({w for (_, w), _ in powers}))
        raise Wrong("bytes_powers_of_two", got=got, params=params, world=world, powers=worlds)
    raise Wrong("bytes_other", got=got, params=params, world=world)


exercise = Exercise(
    "3.5",
    "bytes_sent",
    _check_bytes,
    bytes_sent,
    texts=MESSAGES,
    hints=("bytes_ring", "bytes_size", "bytes_formula"),
    mistakes={
        "bytes_no_float": Mistake(hint="bytes_size"),
        "bytes_one_pass": Mistake(hint="bytes_ring"),
        "bytes_whole_tensor": Mistake(hint="bytes_ring"),
        "bytes_whole_each_step": Mistake(hint="bytes_ring"),
        "bytes_to_everyone": Mistake(hint="bytes_ring"),
        "bytes_powers_of_two": Mistake(hint="bytes_ring"),
        "bytes_other": Mistake(hint="bytes_ring"),
    },
    further=True,
    hidden=on_hidden_seeds(_check_bytes),
    space=SPACE,
)
