"""1.1 gpu_for_this_rank: the GPU of this rank on its machine (LOCAL_RANK)."""

from __future__ import annotations

import os

from ... import i18n
from ...i18n import messages
from ...launcher.plain import shown
from ..kit import (
    Exercise,
    Mistake,
    Phrase,
    Wrong,
    and_list,
    run_on_ranks,
)
from ..space import CHECK_SEED, HIDDEN_SEEDS, Space, on_hidden_seeds, trying

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
        "gpu_kept": (
            "Called again in the same process with the environment of rank {rank} (local "
            "rank {local} on machine {node}), it returned {got} in a process whose first call "
            "was as local rank {first}, and {other} in one whose first call was as local rank "
            "{other_first}: what it returns depends on an earlier call, not only on "
            "LOCAL_RANK now. This rank's GPU is {want}: read LOCAL_RANK on every call and "
            "keep nothing from an earlier one."
        ),
        "gpu_kept.title": "kept what its first call found",
        "gpu_layout": "{machines} machines x {per} ranks",
        "gpu_layout_one": "1 machine x {per} ranks",
        "gpu_ok": (
            "cuda:LOCAL_RANK on every rank of {first}, then, called again in the same "
            "processes with the environment of each rank of {others}, cuda:LOCAL_RANK each "
            "time."
        ),
    },
)


def gpu_for_this_rank():
    import torch

    return torch.device("cuda", int(os.environ["LOCAL_RANK"]))


def layout_env(rank: int, machines: int, per: int) -> dict[str, str]:
    """What torchrun tells rank `rank` of `machines` machines x `per` ranks about its place
    (launcher/plan.py's rank_environment, its layout part): a pretend rank's environment."""
    node, local = divmod(rank, per)
    world = str(machines * per)
    return {
        "RANK": str(rank),
        "LOCAL_RANK": str(local),
        "GROUP_RANK": str(node),
        "ROLE_RANK": str(rank),
        "LOCAL_WORLD_SIZE": str(per),
        "WORLD_SIZE": world,
        "GROUP_WORLD_SIZE": str(machines),
        "ROLE_WORLD_SIZE": world,
    }


def _gpu_harness(gpu_for_this_rank, pretend):
    """In each rank: the answer in the rank's own environment, then again in the same process
    as every rank of each pretend layout (machines, ranks per machine). Where the rank is,
    read before each call (an answer that sets LOCAL_RANK moves nothing), next to the answer
    as text."""
    from unittest import mock

    keys = ("RANK", "LOCAL_RANK", "GROUP_RANK", "LOCAL_WORLD_SIZE")
    calls = [{k: int(os.environ[k]) for k in keys}]
    calls[0]["got"] = _device_name(gpu_for_this_rank())
    for machines, per in pretend:
        for rank in range(machines * per):
            env = layout_env(rank, machines, per)
            with mock.patch.dict(os.environ, env):
                got = _device_name(gpu_for_this_rank())
            calls.append({**{k: int(env[k]) for k in keys}, "got": got})
    return calls


def _device_name(answer) -> str:
    """'cuda:1' for torch.device('cuda', 1), 'cuda:1' or 1; else the answer's repr (as a
    plain str: its own __repr__ may return a str that says it equals everything)."""
    import torch

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


# Each seed's draw: the layout the ranks are launched in (machines, ranks per machine), then
# the layouts each rank is called in again, in the same process. check(): the notebook's 2 x
# 2, then 1 x 3 and 2 x 3 (not 2 ranks a machine: RANK % 2 fails); the grader's other layouts.
GPU_DRAWS = {
    CHECK_SEED: ((2, 2), ((1, 3), (2, 3))),
    HIDDEN_SEEDS[0]: ((3, 2), ((1, 2), (4, 2))),
    HIDDEN_SEEDS[1]: ((1, 3), ((2, 4), (3, 1))),
}
SPACE = Space(
    drawn={
        "world": (2, 3, 4, 6, 8),
        "machines": (1, 2, 3, 4),
        "calls": (10, 11, 12),
    },
    why_not={
        "steps": "it keeps nothing from one call to the next: the calls are drawn above",
        "counts": "it is given no count: its numbers are the launch's, drawn as world and "
        "machines (1 to 4 ranks per machine)",
        "dtypes": "it handles no values: it reads the environment and names a device",
        "model": "it is given no model",
        "lengths": "it is given no data",
        "device": "it is given no model or data: it names the device, from LOCAL_RANK",
    },
)


def _check_gpu(fn, seed: int = CHECK_SEED) -> Phrase:
    (machines, per), pretend = GPU_DRAWS[seed]
    runs = run_on_ranks(_gpu_harness, fn, pretend, nprocs=machines * per, nnodes=machines)
    with trying(ranks=machines * per, machines=machines):
        _judge_layout([calls[0] for calls in runs], 1)
    start = 1
    for machines, per in pretend:
        end = start + machines * per
        with trying(ranks=machines * per, machines=machines):
            _judge_kept(runs, start, end)
            _judge_layout(runs[0][start:end], start + 1)  # every process answered alike
        start = end
    layouts = [_layout(m, p) for m, p in pretend]
    return Phrase("gpu_ok", first=_layout(*GPU_DRAWS[seed][0]), others=and_list(layouts))


def _layout(machines: int, per: int) -> Phrase:
    return Phrase("gpu_layout_one" if machines == 1 else "gpu_layout", machines=machines, per=per)


def _judge_kept(runs: list[list[dict]], start: int, end: int) -> None:
    """The same environment answered differently by two processes, which differ only in the
    calls they made before (their first, as their own rank): the answer kept something."""
    for k in range(start, end):
        answers = {calls[k]["got"]: calls[0]["LOCAL_RANK"] for calls in runs}
        if len(answers) == 1:
            continue
        env, want = runs[0][k], f"cuda:{runs[0][k]['LOCAL_RANK']}"
        got = next(g for g in answers if g != want)
        other = next(g for g in answers if g != got)
        with trying(call=k + 1):
            raise Wrong(
                "gpu_kept",
                rank=env["RANK"],
                local=env["LOCAL_RANK"],
                node=env["GROUP_RANK"],
                got=got,
                first=answers[got],
                other=other,
                other_first=answers[other],
                want=want,
            )


def _judge_layout(results: list[dict], call: int) -> None:
    """Every rank of one layout: cuda:LOCAL_RANK, or the Wrong that names what it used."""
    for k, env in enumerate(results):
        with trying(call=call + k if call > 1 else None):
            _judge_rank(env, results)


def _judge_rank(env: dict, results: list[dict]) -> None:
    got, want = env["got"], f"cuda:{env['LOCAL_RANK']}"
    if got == want:
        return
    rank, local, node = env["RANK"], env["LOCAL_RANK"], env["GROUP_RANK"]
    if not got.startswith(("cuda", "cpu")):
        raise Wrong("gpu_type", got=got, rank=rank)
    if got == "cuda":
        raise Wrong("gpu_no_index", got=got)
    if got == f"cuda:{rank}":
        last = env["LOCAL_WORLD_SIZE"] - 1
        raise Wrong("gpu_global", rank=rank, local=local, node=node, last=last, got=got)
    same = [e["RANK"] for e in results if e["GROUP_RANK"] == node and e["got"] == got]
    if len(same) > 1:
        raise Wrong("gpu_node", ranks=i18n.listed(same), node=node, got=got)
    raise Wrong("gpu_other", rank=rank, local=local, node=node, got=got, want=want)


exercise = Exercise(
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
        "gpu_kept": Mistake(hint="gpu_local_rank"),
    },
    hidden=on_hidden_seeds(_check_gpu),
    space=SPACE,
)
