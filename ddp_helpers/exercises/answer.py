"""An answer as a check holds it (a leaf: the grader's scorer imports it without the checks)."""

from __future__ import annotations

import pickle


class Answer:
    """An answer as a check holds it: for its ranks only. A check runs an answer on a rank
    (run_on_ranks, run_answer), never in its own process, which in the grader is the one
    that decides the grade; called here, it refuses. Sent to a rank, it is the answer
    again there: the object itself (a learner's check), or loaded from the bytes the
    learner's kernel pickled, never loaded before (the grader's scorer)."""

    def __init__(self, obj=None, *, pickled: bytes | None = None):
        self.obj, self.pickled = obj, pickled

    def __reduce__(self):
        return (pickle.loads, (self.pickled,)) if self.pickled is not None else (_same, (self.obj,))

    def __call__(self, *args, **kwargs):
        raise TypeError(
            "a check runs no answer in its own process: it runs it on a rank (exercises.run_answer)"
        )


def _same(obj):
    return obj
