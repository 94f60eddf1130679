"""5.3 predict_bytes_sent: the bytes each rank sends in a step, DDP against full sharding.

Lesson 03's ring (exercise 3.5, lesson03/traffic.py) carries over: each pass around a ring of
N ranks sends (N - 1)/N of the tensor from each rank. DDP's all-reduce of the gradients is two
passes (a reduce-scatter, then an all-gather); full sharding (ZeRO-3, FSDP) makes three: an
all-gather of the parameters before the forward, another before the backward, and a
reduce-scatter of the gradients. In float32, 4 bytes a value: 2(N - 1)/N x 4P for DDP,
3(N - 1)/N x 4P for full sharding, 1.5 times as much. A prediction is right within a byte or
a millionth of the value (lesson 03's rule, `_close`).
"""

from __future__ import annotations

import random

from ...i18n import messages
from ..kit import Exercise, Listed, Mistake, Phrase, Wrong, answers_to
from ..lesson03.traffic import MESSAGES as RING_MESSAGES  # lesson 03's hint on the ring
from ..lesson03.traffic import _close, _ring_bytes
from ..space import CHECK_SEED, HIDDEN_SEEDS, Space, on_hidden_seeds

MESSAGES = messages(
    "exercises.lesson05.traffic",
    {
        "hint.traffic_passes": (
            "Count the passes around the ring in one step. DDP: one all-reduce of the "
            "gradients, two passes. Full sharding: the parameters all-gathered before the "
            "forward, all-gathered again before the backward (each layer's were freed after "
            "its forward), and the gradients reduce-scattered: three passes."
        ),
        "hint.traffic_size": (
            "Gradients and parameters are float32: 4 bytes (32 bits) a value, so a tensor "
            "of P values is 4 x P bytes."
        ),
        "hint.traffic_formula": (
            "One pass sends (world_size - 1) / world_size x 4 x parameters bytes from each "
            'rank: return {{"ddp": 2 x that, "fsdp": 3 x that}}.'
        ),
        "traffic_shape": (
            'predict_bytes_sent returned {got!r}; it returns a dict of two numbers, {{"ddp": '
            'bytes, "fsdp": bytes}}.'
        ),
        "traffic_shape.title": "not a dict of ddp and fsdp bytes",
        "traffic_no_share": (
            "{got!r} sends the whole tensor at each pass, for {params:,} parameters on {world} "
            "ranks; in a ring each rank sends one N-th of it at each of the N - 1 steps of a "
            "pass: (N - 1)/N of the tensor."
        ),
        "traffic_no_share.title": "the (N - 1)/N of a ring left out",
        "traffic_one_pass": (
            "{ddp:,.0f} bytes for DDP is one pass around the ring, the reduce-scatter; the "
            "all-gather that completes the all-reduce sends as much again."
        ),
        "traffic_one_pass.title": "DDP's all-reduce counted as one pass",
        "traffic_no_regather": (
            "{fsdp:,.0f} bytes for full sharding counts two passes: an all-gather and the "
            "reduce-scatter. Each layer's parameters are freed after its forward and gathered "
            "again before its backward: three passes."
        ),
        "traffic_no_regather.title": "the backward's all-gather left out",
        "traffic_bits": (
            "{got!r} counts bits, not bytes, for {params:,} parameters on {world} ranks: a "
            "byte is 8 bits."
        ),
        "traffic_bits.title": "bits, not bytes",
        "traffic_no_float": (
            "{got!r} counts values, not bytes, for {params:,} parameters on {world} ranks: "
            "each float32 takes 4 bytes."
        ),
        "traffic_no_float.title": "values, not bytes",
        "traffic_notebook_params": (
            "{got!r} is what {notebook:,} parameters, the notebook's model, would send on "
            "{world} ranks; the check asked about {params:,} parameters: use the argument."
        ),
        "traffic_notebook_params.title": "the notebook's parameter count, not the argument",
        "traffic_notebook_world": (
            "{got!r} is what {params:,} parameters would send on {notebook} ranks, the "
            "notebook's; the check asked about {world} ranks: use the argument."
        ),
        "traffic_notebook_world.title": "the notebook's world size, not the argument",
        "traffic_other": "{got!r} is not it, for {params:,} parameters on {world} ranks.",
        "traffic_other.title": "another number",
        "traffic_ok": (
            "DDP 2(N - 1)/N x 4 x parameters, full sharding 3(N - 1)/N x 4 x parameters: "
            "{cases}. Full sharding sends 1.5 times what DDP sends, whatever N."
        ),
        "traffic_case": (
            "{ddp:,.0f} and {fsdp:,.0f} bytes for {params:,} parameters on {world} ranks"
        ),
    },
)


def predict_bytes_sent(parameters, world_size):
    one_pass = (world_size - 1) / world_size * 4 * parameters
    return {"ddp": 2 * one_pass, "fsdp": 3 * one_pass}


def _fsdp_bytes(params: int, world: int) -> float:
    """Full sharding's bytes: three passes where DDP's all-reduce makes two."""
    return 1.5 * _ring_bytes(params, world)


# The notebook's counts, none of them drawn: the demo's model (demos/sharding.py, 64 wide, 4
# blocks: 17,344 parameters with gradients of 17,346) and the lesson's own (16 wide, 3
# blocks: 992 of 994); and the world sizes its cells measure. An answer that reads one of
# them instead of its argument must fail, and is named.
NOTEBOOK_PARAMS = (17_344, 17_346, 992, 994)
NOTEBOOK_WORLDS = (2, 4)
# World sizes by seed: 3 and other sizes that are not powers of two, and one rank, which
# sends nothing.
WORLDS = {
    CHECK_SEED: (2, 3, 4, 5, 8, 1),
    HIDDEN_SEEDS[0]: (6, 3, 12, 2),
    HIDDEN_SEEDS[1]: (7, 4, 16, 3),
}


def _cases(seed: int) -> list[tuple[int, int]]:
    """(parameters, world size) of each case: check() begins with 1,000,000 parameters on 2
    and 3 ranks; the others' counts are drawn, from thousands to billions."""
    rng = random.Random(f"traffic5/{seed}")
    cases = []
    for k, world in enumerate(WORLDS[seed]):
        if seed == CHECK_SEED and k < 2:
            params = 1_000_000
        else:
            params = rng.choice([rng.randint(10_000, 999_999), rng.randint(10**6, 8 * 10**9)])
        cases.append((params + 1 if params in NOTEBOOK_PARAMS else params, world))
    return cases


SPACE = Space(
    drawn={
        "world": tuple(sorted({w for ws in WORLDS.values() for w in ws})),
        "calls": tuple(len(WORLDS[seed]) for seed in WORLDS),
        "counts": {"parameters": tuple(sorted({p for seed in WORLDS for p, _ in _cases(seed)}))},
    },
    why_not={
        "machines": "a ring has one link a rank, whichever machine it is on: the bytes "
        "depend on the ranks alone",
        "steps": "one step's collectives, no loop",
        "dtypes": "the question is about float32 gradients and parameters (4 bytes each): "
        "predict_bytes_sent(parameters, world_size) takes no dtype",
        "model": "it is given a count of parameters, not a model",
        "lengths": "it is given counts, not data: the parameter counts are drawn as counts",
        "device": "it is given no tensor",
    },
    notebook={"parameters": NOTEBOOK_PARAMS[0]},
    world_from="world_size",
)


def _shaped(got) -> bool:
    """A dict with a number (not a bool) under "ddp" and under "fsdp"."""
    return isinstance(got, dict) and all(
        isinstance(got.get(key), (int, float)) and not isinstance(got.get(key), bool)
        for key in ("ddp", "fsdp")
    )


def _right(got: dict, params: int, world: int) -> bool:
    return _close(got["ddp"], _ring_bytes(params, world)) and _close(
        got["fsdp"], _fsdp_bytes(params, world)
    )


# What other formulas give, each a mistake of its own: named only when the answer's ddp (or
# fsdp) is that formula's number in every case with several ranks.
DDP_WRONG = {
    "traffic_no_share": lambda p, w: 2 * 4 * p,
    "traffic_one_pass": lambda p, w: _ring_bytes(p, w) / 2,
    "traffic_bits": lambda p, w: 8 * _ring_bytes(p, w),
    "traffic_no_float": lambda p, w: _ring_bytes(p, w) / 4,
}
FSDP_WRONG = {
    "traffic_no_share": lambda p, w: 3 * 4 * p,
    "traffic_no_regather": _ring_bytes,
    "traffic_bits": lambda p, w: 8 * _fsdp_bytes(p, w),
    "traffic_no_float": lambda p, w: _fsdp_bytes(p, w) / 4,
}


def _check_traffic(fn, seed: int = CHECK_SEED) -> Phrase:
    cases = _cases(seed)
    answers = list(answers_to(fn, cases))
    for got in answers:
        if not _shaped(got):
            raise Wrong("traffic_shape", got=got)
    for (params, world), got in zip(cases, answers, strict=True):
        if not _right(got, params, world):
            _judge_wrong(cases, answers, got, params, world)
    shown = [
        Phrase("traffic_case", params=p, world=w, ddp=_ring_bytes(p, w), fsdp=_fsdp_bytes(p, w))
        for p, w in cases[:2]
    ]
    return Phrase("traffic_ok", cases=Listed(shown))


def _all(several, part: str, formula) -> bool:
    """Whether the answers' `part` ("ddp" or "fsdp") is formula(params, world) in every case."""
    return all(_close(a[part], formula(p, w)) for (p, w), a in several)


def _as_if(several, params: int | None = None, world: int | None = None) -> bool:
    """Whether the answers are right for `params` parameters (or `world` ranks) in every case,
    in place of the case's own."""
    return all(_right(a, params or p, world or w) for (p, w), a in several)


def _judge_wrong(cases, answers, got, params: int, world: int) -> None:
    """The Wrong for an answer wrong on (params, world): the notebook's count or world size
    read, a formula of its own for ddp (or, ddp right, for fsdp), or another number."""
    # One rank sends nothing: an answer may say so apart from its formula, so the formulas
    # are matched on the cases with several ranks.
    several = [(case, a) for case, a in zip(cases, answers, strict=True) if case[1] > 1]
    fields = {"got": got, "params": params, "world": world}
    for notebook in NOTEBOOK_PARAMS:
        if _as_if(several, params=notebook):
            raise Wrong("traffic_notebook_params", notebook=notebook, **fields)
    for notebook in NOTEBOOK_WORLDS:
        if _as_if(several, world=notebook):
            raise Wrong("traffic_notebook_world", notebook=notebook, **fields)
    part, formulas = (
        ("fsdp", FSDP_WRONG) if _all(several, "ddp", _ring_bytes) else ("ddp", DDP_WRONG)
    )
    for key, formula in formulas.items():
        if _all(several, part, formula):
            raise Wrong(key, ddp=got["ddp"], fsdp=got["fsdp"], **fields)
    raise Wrong("traffic_other", **fields)


exercise = Exercise(
    "5.3",
    "predict_bytes_sent",
    _check_traffic,
    predict_bytes_sent,
    texts=(MESSAGES, RING_MESSAGES),
    hints=("bytes_ring", "traffic_passes", "traffic_size", "traffic_formula"),
    mistakes={
        "traffic_shape": Mistake(),
        "traffic_no_share": Mistake(hint="bytes_ring"),
        "traffic_one_pass": Mistake(hint="bytes_ring"),
        "traffic_no_regather": Mistake(hint="traffic_passes"),
        "traffic_bits": Mistake(hint="traffic_size"),
        "traffic_no_float": Mistake(hint="traffic_size"),
        "traffic_notebook_params": Mistake(),
        "traffic_notebook_world": Mistake(),
        "traffic_other": Mistake(hint="traffic_passes"),
    },
    hidden=on_hidden_seeds(_check_traffic),
    space=SPACE,
    further=True,
)
