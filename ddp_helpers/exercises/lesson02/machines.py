"""The pretend machines lesson 02's checks run an answer on, as their messages name them
(2.1's and 2.2's: one table for both)."""

from __future__ import annotations

from ...i18n import messages

MESSAGES = messages(
    "exercises.lesson02.machines",
    {
        "machine_one": "a machine with {gpus} GPU(s) running {local} rank(s)",
        "machine_no_gpu": "a machine with no GPU running {local} rank(s)",
        "machine_many": (
            "{nodes} machines with {gpus} GPU(s) each, {local} ranks per machine "
            "(WORLD_SIZE={world}, LOCAL_WORLD_SIZE={local})"
        ),
    },
)


def _machine_key(gpus: int, nodes: int) -> str:
    """How a pretend machine is named: several, one, or one without a GPU."""
    if nodes > 1:
        return "machine_many"
    return "machine_one" if gpus else "machine_no_gpu"
