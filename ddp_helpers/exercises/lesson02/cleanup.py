"""2.3 cleanup: every rank leaves the process group."""

from __future__ import annotations

from ...i18n import messages
from ..kit import Exercise, Listed, Mistake, Phrase, Wrong, rank_mistakes, run_on_ranks
from ..space import CHECK_SEED, HIDDEN_SEEDS, Space, on_hidden_seeds, trying

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
            "After cleanup(), the process group is still initialised on rank(s) {ranks}, "
            "while the others left it: every rank must leave."
        ),
        "cleanup_left_some.title": "only some ranks left the process group",
        "cleanup_kept": (
            "cleanup() left the first process group on every rank; called again in the same "
            "process, after the ranks had joined a second one, it left that one initialised "
            "on rank(s) {ranks}: it went by what an earlier call did, not by the group there "
            "is now. Ask dist.is_initialized() if you must, on every call."
        ),
        "cleanup_kept.title": "depends on an earlier call",
        "cleanup_ok": (
            "After cleanup() no process group is left on any rank, on 3 ranks and on 2 "
            "machines x 2 ranks, and again after each rank joined a second group."
        ),
    },
)


def cleanup():
    import torch.distributed as dist

    dist.destroy_process_group()


def _cleanup_harness(cleanup):
    """On each rank: join a group and cleanup(), twice in this process (the second group
    made on the first one's store, under a prefix of its own); after each, whether a group
    is left."""
    import datetime

    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    timeout = datetime.timedelta(seconds=20)
    dist.init_process_group("gloo", timeout=timeout)
    store, rank, world = c10d._get_default_store(), dist.get_rank(), dist.get_world_size()
    left = []
    for call in range(CALLS):
        if call:  # at once: the launcher makes that safe (barrier after init, rank 0 last)
            prefixed = dist.PrefixStore(f"again{call}", store)
            dist.init_process_group(
                "gloo", store=prefixed, rank=rank, world_size=world, timeout=timeout
            )
        cleanup()
        left.append(dist.is_initialized())
        if left[-1]:
            dist.destroy_process_group()  # the check's own, so that the rank goes on cleanly
    return {"left": left}


CALLS = 2  # groups each rank joins and leaves, one after the other
# (ranks, machines) of each run, by seed: check() 3 ranks on one machine and 2 x 2; the
# grader's, other layouts.
CLEANUP_RUNS = {
    CHECK_SEED: ((3, 1), (4, 2)),
    HIDDEN_SEEDS[0]: ((2, 1),),
    HIDDEN_SEEDS[1]: ((6, 3),),
}
SPACE = Space(
    drawn={
        "world": (2, 3, 4, 6),
        "machines": (1, 2, 3),
        "calls": (CALLS,),
    },
    why_not={
        "steps": "it is called once a group: the groups, one after the other, are the calls",
        "counts": "it is given no count",
        "dtypes": "it handles no values",
        "model": "it is given no model",
        "lengths": "it is given no data",
        "device": "it leaves a group: no tensor or model is handed to it",
    },
)


def _check_cleanup(fn, seed: int = CHECK_SEED) -> Phrase:
    for ranks, machines in CLEANUP_RUNS[seed]:
        results = run_on_ranks(_cleanup_harness, fn, nprocs=ranks, nnodes=machines)
        for call in range(CALLS):
            with trying(ranks=ranks, machines=machines, call=call + 1 if call else None):
                _judge_left([r["left"] for r in results], call)
    return Phrase("cleanup_ok")


def _judge_left(left: list[list[bool]], call: int) -> None:
    """After call `call` of cleanup(): no group left on any rank, or the Wrong that says where."""
    still = [rank for rank, groups in enumerate(left) if groups[call]]
    if not still:
        return
    if call and not any(groups[0] for groups in left):
        raise Wrong("cleanup_kept", ranks=Listed(still))
    if len(still) == len(left):
        raise Wrong("cleanup_left_all")
    raise Wrong("cleanup_left_some", ranks=Listed(still))


exercise = Exercise(
    "2.3",
    "cleanup",
    _check_cleanup,
    cleanup,
    texts=MESSAGES,
    hints=("cleanup_leave", "cleanup_every_rank", "cleanup_code"),
    mistakes={
        "cleanup_left_all": Mistake(hint="cleanup_leave"),
        "cleanup_left_some": Mistake(hint="cleanup_every_rank"),
        **rank_mistakes(hint="cleanup_every_rank"),
        "cleanup_kept": Mistake(hint="cleanup_leave"),
    },
    hidden=on_hidden_seeds(_check_cleanup),
    space=SPACE,
)
