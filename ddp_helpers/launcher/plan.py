"""Launch policy: the backend, the simulated nodes, their GPUs and each rank's environment.

Pure functions of the options and of what the machine has, so that every rule can be
tested without starting a process (and read in one place). Every environment variable the
launcher sets, in the zygote or in a rank, is decided here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .. import i18n
from ..i18n import messages

BACKENDS = ("auto", "gloo", "nccl")
MASTER_ADDR = "127.0.0.1"  # the rendezvous stays on this machine (docs/launcher.md)

# Learner-facing text of this module, in one place so that it can be translated.
MESSAGES = messages(
    "launcher.plan",
    {
        "bad_nprocs": "nprocs must be a whole number of ranks, 1 or more; got {value!r}.",
        "bad_nnodes": (
            "nnodes must be a whole number of simulated machines, 1 or more; got {value!r}."
        ),
        "uneven_nodes": (
            "nprocs={nprocs} ranks cannot be spread evenly over nnodes={nnodes} machines: torchrun "
            "starts the same number of ranks on every node (--nproc-per-node). Choose nprocs as "
            "a multiple of nnodes, e.g. nprocs={suggest}, nnodes={nnodes}."
        ),
        "bad_backend": (
            "backend must be 'auto', 'gloo' or 'nccl'; got {value!r}. 'auto' picks nccl when "
            "every rank can have a GPU of its own and gloo otherwise."
        ),
        "bad_timeout": "timeout must be a number of seconds above 0, or None; got {value!r}.",
        "bad_guards": "guards must be True or False; got {value!r}.",
        "nccl_no_gpus": (
            "backend='nccl' needs a GPU of its own for every rank: {nprocs} ranks were asked for "
            "but {gpus} GPU(s) were found. Use backend='gloo' (it runs on the CPU) or "
            "backend='auto'."
        ),
        "shared_gpus": (
            "[ddp_helpers] note: {nnodes} simulated machines x {per_node} ranks would need {need} "
            "GPUs, one per rank, but this machine has {gpus}. Two ranks pinning the same GPU make "
            "nccl fail ('Duplicate GPU detected'), so the ranks see no GPU "
            "(CUDA_VISIBLE_DEVICES='') and run on the CPU with gloo."
        ),
    },
)


@dataclass(frozen=True)
class Options:
    """What the caller asked for, checked: see `Options.checked`."""

    nprocs: int = 2
    nnodes: int = 1
    backend: str = "auto"
    timeout: float | None = None
    ordered: bool | None = None
    # The launcher's three guards (docs/launcher.md, "Guards"): the init barrier, groups
    # kept to the end, os._exit. False: each rank runs and ends as under torchrun.
    guards: bool = True

    @classmethod
    def checked(
        cls, nprocs=2, nnodes=1, backend="auto", timeout=None, ordered=None, guards=True
    ) -> Options:
        """The options, or a ValueError that says what is wrong and what would work."""
        if not _whole(nprocs) or nprocs < 1:
            raise ValueError(MESSAGES["bad_nprocs"].format(value=nprocs))
        if not _whole(nnodes) or nnodes < 1:
            raise ValueError(MESSAGES["bad_nnodes"].format(value=nnodes))
        if nprocs % nnodes:
            suggest = max(nnodes, nprocs - nprocs % nnodes)
            raise ValueError(
                MESSAGES["uneven_nodes"].format(nprocs=nprocs, nnodes=nnodes, suggest=suggest)
            )
        if backend not in BACKENDS:
            raise ValueError(MESSAGES["bad_backend"].format(value=backend))
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0
        ):
            raise ValueError(MESSAGES["bad_timeout"].format(value=timeout))
        if not isinstance(guards, bool):
            raise ValueError(MESSAGES["bad_guards"].format(value=guards))
        return cls(nprocs, nnodes, backend, timeout, ordered, guards)

    @property
    def per_node(self) -> int:
        return self.nprocs // self.nnodes


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class Placement:
    """Where the ranks run: the backend, and which GPUs each simulated node sees."""

    backend: str
    # CUDA_VISIBLE_DEVICES for each node; None: the machine's own setting, unchanged.
    visible: tuple[str | None, ...]
    notice: str | None = None


def place(options: Options, gpus: int, visible_now: str | None) -> Placement:
    """The backend and each node's GPUs, for a machine with `gpus` visible GPUs.

    One simulated node sees the machine as it is. Several nodes each see only their own
    GPUs, as separate machines would, when there is one per rank; otherwise none, since two
    ranks on one GPU is an error under nccl, and gloo on the CPU is the honest fallback.
    `visible_now` is the CUDA_VISIBLE_DEVICES the ranks would inherit (None if unset).
    """
    enough = gpus >= options.nprocs
    if options.backend == "nccl" and not enough:
        raise ValueError(MESSAGES["nccl_no_gpus"].format(nprocs=options.nprocs, gpus=gpus))
    backend = options.backend if options.backend != "auto" else ("nccl" if enough else "gloo")
    if options.nnodes == 1:
        return Placement(backend, (None,))
    if gpus == 0:
        return Placement(backend, (None,) * options.nnodes)
    if not enough:
        notice = MESSAGES["shared_gpus"].format(
            nnodes=options.nnodes, per_node=options.per_node, need=options.nprocs, gpus=gpus
        )
        return Placement(backend, ("",) * options.nnodes, notice)
    ids = _visible_ids(visible_now, gpus)
    n = options.per_node
    return Placement(
        backend, tuple(",".join(ids[k * n : (k + 1) * n]) for k in range(options.nnodes))
    )


def _visible_ids(visible_now: str | None, gpus: int) -> list[str]:
    """The GPUs the ranks could see, by the names CUDA_VISIBLE_DEVICES uses."""
    if visible_now:
        names = [name.strip() for name in visible_now.split(",") if name.strip()]
        if len(names) >= gpus:
            return names[:gpus]
    return [str(i) for i in range(gpus)]


def zygote_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment the zygote starts with: the kernel's, with one thread per library."""
    env = dict(environ)
    # A thread pool that exists at fork time is copied half-alive into every rank. Ranks
    # set their own thread count (shared_environment).
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    env["OMP_NUM_THREADS"] = "1"
    # c10d's C++ warnings bury the one error that matters in a cell; torch reads this
    # once, when it loads: in the zygote (and in whatever a rank starts, see below).
    env.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    return env


def shared_environment(
    environ: Mapping[str, str],
    nprocs: int,
    backend: str,
    cpus: int,
    loopback: str | None,
    guards: bool = True,
) -> tuple[dict[str, str], int]:
    """The environment every rank of a run shares, and its thread count.

    `environ` is the kernel's, `cpus` the cores this process may use, `loopback` the name
    of the loopback interface (None if unknown), `guards` the launch's (Options.guards).
    """
    env = dict(environ)
    threads = env.get("OMP_NUM_THREADS", "")
    threads = int(threads) if threads.isdigit() and int(threads) > 0 else 0
    # Simulated nodes share this machine's cores like any other ranks.
    threads = threads or max(1, cpus // nprocs)
    env["OMP_NUM_THREADS"] = str(threads)
    env["MPLBACKEND"] = "Agg"  # the notebook's inline backend means nothing in a rank
    env.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")  # as in the zygote, for what ranks start
    # init_process_group() returns on no rank before every rank has connected (torch's own
    # store barrier): without it, a rank that destroys the group at once can close its
    # sockets on a peer still connecting ("connectFullMesh ... closed by peer"). Rank 0,
    # which serves the store the barrier uses, leaves last (rank.py's _leave_last). One of
    # the guards: without them, only the user's own setting (as under torchrun).
    if guards:
        env.setdefault("TORCH_DIST_INIT_BARRIER", "1")
    # gloo and nccl open listening sockets of their own, by default on the address the
    # host name resolves to (reachable from the network): keep a one-machine run on
    # loopback unless the user chose an interface.
    if loopback:
        env.setdefault("GLOO_SOCKET_IFNAME", loopback)
        env.setdefault("NCCL_SOCKET_IFNAME", loopback)
    env["PYTHONUNBUFFERED"] = "1"
    env["DDP_HELPERS_BACKEND"] = backend
    # The ranks speak the notebook's language, chosen with use() or for one block (using()).
    env[i18n.ENV] = i18n.current()
    return env, threads


def rank_environments(
    options: Options, placement: Placement, port: int, run_id: str, shared: Mapping[str, str]
) -> list[dict[str, str]]:
    """What torchrun adds for each rank, by rank, to the `shared` environment."""
    async_errors = shared.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")  # torchrun's default
    return [
        rank_environment(options, placement, rank, MASTER_ADDR, port, run_id, async_errors)
        for rank in range(options.nprocs)
    ]


def rank_environment(
    options: Options,
    placement: Placement,
    rank: int,
    master_addr: str,
    master_port: int,
    run_id: str,
    nccl_async_error_handling: str = "1",
) -> dict[str, str]:
    """The variables torchrun gives a rank, for this rank of a run on `options.nnodes` nodes.

    As `torchrun --nnodes N --nproc-per-node P` on each of N machines would set them (see
    torch/distributed/run.py, "Environment Variables"); the rendezvous store is served by
    rank 0 itself, not by an agent (TORCHELASTIC_USE_AGENT_STORE=False).
    """
    node, local_rank = divmod(rank, options.per_node)
    env = {
        "RANK": str(rank),
        "LOCAL_RANK": str(local_rank),
        "GROUP_RANK": str(node),
        "ROLE_RANK": str(rank),
        "ROLE_NAME": "default",
        "LOCAL_WORLD_SIZE": str(options.per_node),
        "WORLD_SIZE": str(options.nprocs),
        "GROUP_WORLD_SIZE": str(options.nnodes),
        "ROLE_WORLD_SIZE": str(options.nprocs),
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(master_port),
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_RUN_ID": run_id,
        "TORCHELASTIC_USE_AGENT_STORE": "False",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": nccl_async_error_handling,
    }
    visible = placement.visible[node]
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    return env


@dataclass(frozen=True)
class StopPolicy:
    """How long a run waits, in seconds, at each step of stopping its ranks (run.Run), as
    torch.distributed.elastic's close() takes its death_sig and timeout."""

    grace: float = 0.2  # the first failure -> SIGTERM to the others: a returning rank's result
    term_to_kill: float = 1.0  # SIGTERM -> SIGKILL
    drain: float = 0.5  # a rank exited -> its control pipe judged, even if a child holds it
    output_after_exit: float = 1.0  # the last exit -> output pipes a child holds let go
    stacks_in: float = 0.3  # at the timeout, every stack in -> SIGKILL
    stacks_wait: float = 2.0  # at the timeout, stacks missing -> SIGKILL anyway
    stacks_wait_interrupted: float = 1.0  # Stop pressed: a learner waits for the stacks
    wedged: float = 5.0  # SIGKILL sent and a rank never reported: the zygote is wedged
    wedged_interrupted: float = 1.5
    tick: float = 0.05  # how often a run looks at its clocks while no message comes
    settle: float = 0.5  # a background spawn's last output read before the next launch

    @property
    def after_timeout(self) -> float:
        """The longest a run takes, past its timeout, to raise: the stacks, SIGKILL, a
        wedged zygote, the last pipes judged and let go."""
        return self.stacks_wait + self.wedged + self.drain + self.output_after_exit


STOP = StopPolicy()
