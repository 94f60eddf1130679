"""2.3 cleanup: every rank leaves the process group."""

from __future__ import annotations

from ... import i18n
from ...i18n import messages
from .._core import Exercise, Mistake, Phrase, Wrong, run_on_ranks

MESSAGES = messages(
    "exercises.lesson02.cleanup",
    {
        "hint.cleanup_leave": (
            "setup() made every rank join the default process group; cleanup() must make it "
            "leave again. dist.is_initialized() says whether a process still belongs to one."
        ),
        "hint.cleanup_every_rank": (
            "Every rank leaves the group itself: a call inside `if rank == 0:` leaves the "
            "other ranks in it."
        ),
        "hint.cleanup_code": "dist.destroy_process_group(), on every rank.",
        "cleanup_left_all": (
            "After cleanup(), dist.is_initialized() is still True on every rank: nobody left "
            "the process group."
        ),
        "cleanup_left_all.title": "no rank left the process group",
        "cleanup_left_some": (
            "After cleanup(), the process group is still initialised on rank {ranks}, while "
            "the other rank left it: every rank must leave."
        ),
        "cleanup_left_some.title": "only some ranks left the process group",
        "cleanup_ok": "After cleanup() no process group is left on either rank.",
    },
)


def cleanup():
    import torch.distributed as dist

    dist.destroy_process_group()


def _cleanup_harness(cleanup):
    """On each rank: join a group, cleanup(), then look whether a group is left."""
    import datetime

    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=20))
    cleanup()  # at once: the launcher makes that safe (barrier after init, rank 0 last)
    left = dist.is_initialized()
    if left:
        dist.destroy_process_group()  # the check's own, so that the rank ends cleanly
    return {"left": left}


def _check_cleanup(fn) -> Phrase:
    results = run_on_ranks(_cleanup_harness, fn, nprocs=2)
    left = [rank for rank, r in enumerate(results) if r["left"]]
    if len(left) == len(results):
        raise Wrong("cleanup_left_all")
    if left:
        raise Wrong("cleanup_left_some", ranks=i18n.listed(left))
    return Phrase("cleanup_ok")


q3 = Exercise(
    "2.3",
    "cleanup",
    _check_cleanup,
    cleanup,
    texts=MESSAGES,
    hints=("cleanup_leave", "cleanup_every_rank", "cleanup_code"),
    mistakes={
        "cleanup_left_all": Mistake(hint="cleanup_leave"),
        "cleanup_left_some": Mistake(hint="cleanup_every_rank"),
        "hang": Mistake(hint="cleanup_every_rank"),
        "mismatch": Mistake(hint="cleanup_every_rank"),
    },
)
