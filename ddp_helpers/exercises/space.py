"""What an answer could hard-code, and what a check draws of it: each exercise's Space.

An answer right in one configuration proves little: it can hard-code the world size, the
machines, its counts or the dtype, or keep what a first call left behind. So each exercise
declares, for every axis of AXES, the values its check draws (`drawn`) or why the axis
does not apply to it (`why_not`), and its check runs the answer on those draws. A check
draws with a seed: the learner's `check()` with CHECK_SEED (the same verdict on every run),
the grader's extra cases with HIDDEN_SEEDS (other counts on the same axes). `trying(...)`
names the configuration a check is in, and a mistake found there says so.

tests/exercises/test_spaces.py holds every exercise to its declaration: each drawn axis
follows its rule (RULES) and is seen drawn, by an answer that watches its own calls (the
sweep's graded right answer, tests/exercises/space_watch.py, or the reference).
"""

from __future__ import annotations

import contextlib
import contextvars
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

# Each axis, and what drawing it means (the rule tests/exercises/test_spaces.py holds).
AXES = {
    "world": "world sizes, 3 among them (not only powers of two)",
    "machines": "simulated machines, 1 and 2",
    "calls": "the answer called at least twice in one process, with other inputs",
    "steps": "at least two steps (of training, of a loop the answer runs)",
    "counts": "the counts it is given (epochs, steps, sizes), none of them the notebook's",
    "dtypes": "dtypes beyond float32 where values are data (float64, large int64)",
    "model": "a model with a frozen parameter and a buffer",
    "lengths": "lengths beyond any small capacity, and several of them",
    "device": "the device of the model or data, which the answer must not assume",
}
CHECK_SEED = 0  # check(): the same draws on every run
HIDDEN_SEEDS = (1, 2)  # the grader's extra cases: other draws of the same space


def on_hidden_seeds(check):
    """The grader's extra cases of a check(answer, seed): the check run on each hidden seed,
    the last one's detail returned (a Wrong in any case stops there)."""

    def hidden(answer):
        for seed in HIDDEN_SEEDS:
            detail = check(answer, seed)
        return detail

    return hidden


@dataclass(frozen=True)
class Space:
    """One exercise's declaration: for each axis the values drawn, or why it has none.

    `drawn["counts"]` maps each count's name to its values; `notebook` gives the notebook's
    own value of a count (which no draw may equal: an answer that ignores its argument and
    uses the notebook's constant must fail). `world_from` names the argument that carries
    the world size where the answer is a function of it (not of the launch).
    """

    drawn: Mapping[str, object]
    why_not: Mapping[str, str]
    notebook: Mapping[str, object] = field(default_factory=dict)
    world_from: str | None = None

    def __post_init__(self):
        both = set(self.drawn) & set(self.why_not)
        neither = set(AXES) - set(self.drawn) - set(self.why_not)
        unknown = (set(self.drawn) | set(self.why_not)) - set(AXES)
        if both or neither or unknown:
            raise ValueError(f"a space declares each axis once: {both=} {neither=} {unknown=}")
        empty = [axis for axis, why in self.why_not.items() if not str(why).strip()]
        if empty:
            raise ValueError(f"say why these axes do not apply: {empty}")

    def values(self, axis: str) -> tuple:
        """Every value drawn on an axis (the check tries each)."""
        return tuple(self.drawn[axis])

    def count(self, name: str, seed: int):
        """The value of count `name` for this seed (deterministic, from its drawn values)."""
        return random.Random(f"{name}/{seed}").choice(list(self.drawn["counts"][name]))


class Tried:
    """The configuration a check was in when it found a mistake (Wrong.tried)."""

    def __init__(self, **config):
        self.config = {k: v for k, v in config.items() if v is not None}


_TRYING: contextvars.ContextVar[dict | None] = contextvars.ContextVar("trying", default=None)


@contextlib.contextmanager
def trying(**config) -> Iterator[None]:
    """Inside: the check tries this configuration (ranks=3, machines=2, dtype="float64",
    call=2, step=2, ...; nested blocks add to it). A Wrong raised inside names it (the
    innermost block's: a Wrong's `tried` is None until one names it)."""
    token = _TRYING.set({**(_TRYING.get() or {}), **config})
    try:
        yield
    except Exception as exc:
        if hasattr(exc, "tried") and exc.tried is None:
            exc.tried = Tried(**_TRYING.get())
        raise
    finally:
        _TRYING.reset(token)
