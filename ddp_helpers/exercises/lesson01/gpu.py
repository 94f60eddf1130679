"""1.1 gpu_for_this_rank: the GPU of this rank on its machine (LOCAL_RANK)."""

from __future__ import annotations

import os

from ... import i18n
from ...i18n import messages
from .._core import (
    Exercise,
    Mistake,
    Phrase,
    Wrong,
    run_on_ranks,
)

MESSAGES = messages(
    "exercises.lesson01.gpu",
    {
        "hint.gpu_per_machine": (
            "GPUs are numbered on each machine separately: every machine has its own cuda:0. "
            "RANK counts across all machines, so on the second machine it is already past "
            "the last GPU number there."
        ),
        "hint.gpu_local_rank": (
            "torchrun (and `launch`) tell each rank its number on its own machine in the "
            "environment variable LOCAL_RANK."
        ),
        "hint.gpu_code": 'return torch.device("cuda", int(os.environ["LOCAL_RANK"]))',
        "gpu_type": (
            "It returned {got} on rank {rank}; return a torch.device such as "
            "torch.device('cuda', 1) (or the string 'cuda:1')."
        ),
        "gpu_type.title": "returned something that is not a device",
        "gpu_no_index": (
            "It returned {got}: without a number every rank uses the current GPU, cuda:0 by "
            "default, and they all pile onto one card. Give each rank its own."
        ),
        "gpu_no_index.title": "cuda without a GPU number",
        "gpu_global": (
            "Rank {rank} is rank {local} on machine {node}, which has GPUs cuda:0 to "
            "cuda:{last}; it returned {got}, which does not exist there."
        ),
        "gpu_global.title": "RANK used where LOCAL_RANK belongs",
        "gpu_node": (
            "Ranks {ranks} on machine {node} all returned {got}: each rank of a machine "
            "needs a GPU of its own."
        ),
        "gpu_node.title": "the ranks of a machine share one GPU",
        "gpu_other": (
            "Rank {rank} (local rank {local} on machine {node}) returned {got}; {want} is its GPU."
        ),
        "gpu_other.title": "another rank's GPU",
        "gpu_ok": (
            "cuda:LOCAL_RANK on every rank of 2 machines x 2 ranks and 3 machines x 2 ranks."
        ),
    },
)


def gpu_for_this_rank():
    import torch

    return torch.device("cuda", int(os.environ["LOCAL_RANK"]))


def _gpu_harness(gpu_for_this_rank):
    """In each rank: where the rank really is, read before the answer runs (an answer that
    sets LOCAL_RANK moves nothing), next to its answer as text."""
    keys = ("RANK", "LOCAL_RANK", "GROUP_RANK", "LOCAL_WORLD_SIZE")
    where = {k: int(os.environ[k]) for k in keys}
    return where, _device_name(gpu_for_this_rank())


def _device_name(answer) -> str:
    """'cuda:1' for torch.device('cuda', 1), 'cuda:1' or 1; else the answer's repr (as a
    plain str: its own __repr__ may return a str that says it equals everything)."""
    import torch

    from ...launcher.plain import shown

    if isinstance(answer, bool):
        return shown(answer)
    if isinstance(answer, int):
        return f"cuda:{int.__index__(answer)}"
    if isinstance(answer, str):
        try:
            answer = torch.device(str.__str__(answer))
        except RuntimeError:
            return shown(answer)
    if type(answer) is torch.device:
        return str(answer)
    return shown(answer)


def _check_gpu(fn, layouts=((4, 2), (6, 3))) -> Phrase:
    for nprocs, nnodes in layouts:
        results = run_on_ranks(_gpu_harness, fn, nprocs=nprocs, nnodes=nnodes)
        for env, got in results:
            want = f"cuda:{env['LOCAL_RANK']}"
            if got == want:
                continue
            rank, local, node = env["RANK"], env["LOCAL_RANK"], env["GROUP_RANK"]
            if not got.startswith(("cuda", "cpu")):
                raise Wrong("gpu_type", got=got, rank=rank)
            if got == "cuda":
                raise Wrong("gpu_no_index", got=got)
            if got == f"cuda:{rank}":
                last = env["LOCAL_WORLD_SIZE"] - 1
                raise Wrong("gpu_global", rank=rank, local=local, node=node, last=last, got=got)
            same = [e["RANK"] for e, g in results if e["GROUP_RANK"] == node and g == got]
            if len(same) > 1:
                ranks = i18n.listed(same)
                raise Wrong("gpu_node", ranks=ranks, node=node, got=got)
            raise Wrong("gpu_other", rank=rank, local=local, node=node, got=got, want=want)
    return Phrase("gpu_ok")


def _hidden_gpu(fn) -> Phrase:
    # Eight ranks on two machines, and one machine: layouts the check does not show.
    return _check_gpu(fn, ((8, 2), (2, 1)))


q1 = Exercise(
    "1.1",
    "gpu_for_this_rank",
    _check_gpu,
    gpu_for_this_rank,
    texts=MESSAGES,
    hints=("gpu_per_machine", "gpu_local_rank", "gpu_code"),
    mistakes={
        "gpu_type": Mistake(hint="gpu_local_rank"),
        "gpu_no_index": Mistake(hint="gpu_local_rank"),
        "gpu_global": Mistake(hint="gpu_per_machine"),
        "gpu_node": Mistake(hint="gpu_local_rank"),
        "gpu_other": Mistake(hint="gpu_local_rank"),
    },
    hidden=_hidden_gpu,
)
