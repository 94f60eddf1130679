"""3.5 bytes_sent (Going further): what a ring all_reduce sends per rank."""

from __future__ import annotations

from ...i18n import messages
from .._core import (
    Exercise,
    Listed,
    Mistake,
    Phrase,
    Wrong,
    answers_to,
)

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


# (params, world size): exercise 3.5's cases, the lesson's wide model among them.
BYTES_CASES = ((1_000_000, 2), (1_000_000, 4), (1_059_841, 8), (10, 1))


def _ring_bytes(params: int, world: int) -> float:
    return 2 * (world - 1) / world * 4 * params


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
    return isinstance(got, (int, float)) and abs(got - value) <= 1e-6 * max(value, 1)


def _check_bytes(fn) -> Phrase:
    answers = list(answers_to(fn, BYTES_CASES))
    for (params, world), got in zip(BYTES_CASES, answers, strict=True):
        if _close(got, _ring_bytes(params, world)):
            continue
        # One rank sends nothing: an answer may say so apart from its formula, so the
        # formulas are matched on the cases with several ranks.
        several = [(case, a) for case, a in zip(BYTES_CASES, answers, strict=True) if case[1] > 1]
        for key, formula in BYTES_WRONG.items():
            if all(_close(a, formula(p, w)) for (p, w), a in several):
                raise Wrong(key, got=got)
        raise Wrong("bytes_other", got=got, params=params, world=world)
    cases = [
        Phrase("bytes_case", world=w, params=p, bytes=_ring_bytes(p, w)) for p, w in BYTES_CASES[:2]
    ]
    return Phrase("bytes_ok", cases=Listed(cases))


q5 = Exercise(
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
        "bytes_other": Mistake(hint="bytes_ring"),
    },
    further=True,
)
