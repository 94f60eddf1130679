"""Launch policy as logic: options, backend, simulated nodes, GPUs, each rank's environment."""

from __future__ import annotations

import pytest

from ddp_helpers.launcher.plan import (
    Options,
    place,
    rank_environment,
    rank_environments,
    shared_environment,
    zygote_environment,
)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"nprocs": 0}, "nprocs must be a whole number of ranks, 1 or more; got 0"),
        ({"nprocs": 2.0}, "nprocs must be a whole number"),
        ({"nprocs": True}, "nprocs must be a whole number"),
        ({"nnodes": 0}, "nnodes must be a whole number of simulated machines"),
        ({"nprocs": 3, "nnodes": 2}, "e.g. nprocs=2, nnodes=2"),
        ({"nprocs": 7, "nnodes": 3}, "nprocs=7 ranks cannot be spread evenly over nnodes=3"),
        ({"backend": "mpi"}, "backend must be 'auto', 'gloo' or 'nccl'; got 'mpi'"),
        ({"timeout": 0}, "timeout must be a number of seconds above 0"),
        ({"timeout": "5"}, "timeout must be a number of seconds above 0"),
    ],
)
def test_bad_options_say_what_is_wrong(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Options.checked(**kwargs)


def test_torchrun_environment_of_two_nodes_of_two_ranks():
    options = Options.checked(nprocs=4, nnodes=2)
    placement = place(options, gpus=0, visible_now=None)
    envs = [rank_environment(options, placement, r, "127.0.0.1", 29500, "run1") for r in range(4)]
    table = [(e["RANK"], e["LOCAL_RANK"], e["GROUP_RANK"]) for e in envs]
    assert table == [("0", "0", "0"), ("1", "1", "0"), ("2", "0", "1"), ("3", "1", "1")]
    for env in envs:
        assert env["WORLD_SIZE"] == env["ROLE_WORLD_SIZE"] == "4"
        assert env["LOCAL_WORLD_SIZE"] == env["GROUP_WORLD_SIZE"] == "2"
        assert env["ROLE_RANK"] == env["RANK"] and env["ROLE_NAME"] == "default"
        assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("127.0.0.1", "29500")
        assert env["TORCHELASTIC_RUN_ID"] == "run1"
        assert env["TORCHELASTIC_RESTART_COUNT"] == env["TORCHELASTIC_MAX_RESTARTS"] == "0"
        # rank 0 serves the store itself; "True" would make every rank a client of an agent
        assert env["TORCHELASTIC_USE_AGENT_STORE"] == "False"
        assert "CUDA_VISIBLE_DEVICES" not in env  # no GPUs: nothing to hide or to share out


def test_one_node_is_the_machine_as_it_is():
    options = Options.checked(nprocs=3)
    placement = place(options, gpus=1, visible_now="5")
    assert placement == type(placement)("gloo", (None,))
    env = rank_environment(options, placement, 2, "127.0.0.1", 1, "r")
    assert (env["RANK"], env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"]) == ("2", "2", "3")
    assert "CUDA_VISIBLE_DEVICES" not in env


@pytest.mark.parametrize(
    ("gpus", "nprocs", "nnodes", "backend"),
    [(0, 2, 1, "gloo"), (1, 2, 1, "gloo"), (2, 2, 1, "nccl"), (8, 4, 2, "nccl"), (3, 4, 2, "gloo")],
)
def test_auto_backend_is_nccl_only_with_a_gpu_for_every_rank(gpus, nprocs, nnodes, backend):
    options = Options.checked(nprocs=nprocs, nnodes=nnodes)
    assert place(options, gpus, None).backend == backend


def test_each_simulated_node_sees_only_its_own_gpus():
    options = Options.checked(nprocs=4, nnodes=2)
    placement = place(options, gpus=4, visible_now=None)
    assert placement.backend == "nccl" and placement.notice is None
    assert placement.visible == ("0,1", "2,3")
    envs = [rank_environment(options, placement, r, "h", 1, "r") for r in range(4)]
    # rank 2 is local rank 0 of node 1: its cuda:0 is the machine's GPU 2
    assert [(e["LOCAL_RANK"], e["CUDA_VISIBLE_DEVICES"]) for e in envs] == [
        ("0", "0,1"),
        ("1", "0,1"),
        ("0", "2,3"),
        ("1", "2,3"),
    ]


def test_node_gpus_follow_the_machines_own_visible_devices():
    options = Options.checked(nprocs=4, nnodes=2)
    placement = place(options, gpus=6, visible_now="7,6,5,4,3,2")
    assert placement.visible == ("7,6", "5,4")
    uuids = "GPU-a, GPU-b,GPU-c,GPU-d"
    assert place(options, 4, uuids).visible == ("GPU-a,GPU-b", "GPU-c,GPU-d")


def test_too_few_gpus_for_every_node_hides_them_and_says_why():
    # 2 GPUs, 2 nodes x 2 ranks: each node's rank 0 would pin cuda:0, the same card.
    options = Options.checked(nprocs=4, nnodes=2)
    placement = place(options, gpus=2, visible_now=None)
    assert placement.backend == "gloo"
    assert placement.visible == ("", "")
    assert "would need 4 GPUs" in placement.notice and "has 2" in placement.notice
    assert "Duplicate GPU detected" in placement.notice and "gloo" in placement.notice
    env = rank_environment(options, placement, 3, "h", 1, "r")
    assert env["CUDA_VISIBLE_DEVICES"] == ""


def test_nccl_asked_for_without_a_gpu_per_rank_is_refused_with_what_works():
    options = Options.checked(nprocs=4, nnodes=2, backend="nccl")
    with pytest.raises(ValueError, match=r"4 ranks were asked for but 2 GPU\(s\).*'gloo'"):
        place(options, gpus=2, visible_now=None)
    assert place(options, gpus=4, visible_now=None).backend == "nccl"


@pytest.mark.parametrize(
    ("omp", "cpus", "nprocs", "threads"),
    [(None, 8, 2, 4), (None, 2, 4, 1), ("3", 8, 2, 3), ("0", 8, 4, 2), ("x", 8, 8, 1)],
)
def test_each_rank_gets_its_share_of_the_cores_unless_omp_num_threads_is_set(
    omp, cpus, nprocs, threads
):
    environ = {} if omp is None else {"OMP_NUM_THREADS": omp}
    env, got = shared_environment(environ, nprocs, "gloo", cpus, "lo")
    assert (got, env["OMP_NUM_THREADS"]) == (threads, str(threads))


def test_the_ranks_environment_is_the_kernels_kept_on_loopback_unless_chosen():
    kernel = {"HOME": "/home/me", "GLOO_SOCKET_IFNAME": "eth1", "TORCH_CPP_LOG_LEVEL": "INFO"}
    env, _ = shared_environment(kernel, 2, "nccl", 4, "lo")
    assert env["HOME"] == "/home/me" and env["MPLBACKEND"] == "Agg"
    assert (env["GLOO_SOCKET_IFNAME"], env["NCCL_SOCKET_IFNAME"]) == ("eth1", "lo")
    assert env["TORCH_CPP_LOG_LEVEL"] == "INFO"  # the user's choice is kept
    assert (env["PYTHONUNBUFFERED"], env["DDP_HELPERS_BACKEND"]) == ("1", "nccl")
    assert kernel == {
        "HOME": "/home/me",
        "GLOO_SOCKET_IFNAME": "eth1",
        "TORCH_CPP_LOG_LEVEL": "INFO",
    }
    quiet, _ = shared_environment({}, 2, "gloo", 4, None)  # no loopback interface known
    assert quiet["TORCH_CPP_LOG_LEVEL"] == "ERROR" and "GLOO_SOCKET_IFNAME" not in quiet


def test_the_ranks_speak_the_kernels_language():
    from ddp_helpers import i18n

    with i18n.using("ja"):
        env, _ = shared_environment({i18n.ENV: "en"}, 2, "gloo", 4, "lo")
    assert env[i18n.ENV] == "ja"


def test_the_zygote_runs_one_thread_per_library():
    env = zygote_environment({"OMP_NUM_THREADS": "8", "OPENBLAS_NUM_THREADS": "2"})
    assert (env["OMP_NUM_THREADS"], env["OPENBLAS_NUM_THREADS"]) == ("1", "2")
    assert zygote_environment({})["OPENBLAS_NUM_THREADS"] == "1"
    assert zygote_environment({})["TORCH_CPP_LOG_LEVEL"] == "ERROR"


def test_every_rank_meets_on_loopback_with_torchruns_nccl_error_handling():
    options = Options.checked(nprocs=2)
    placement = place(options, gpus=0, visible_now=None)
    envs = rank_environments(options, placement, 4242, "r", {})
    assert [e["RANK"] for e in envs] == ["0", "1"]
    assert {(e["MASTER_ADDR"], e["MASTER_PORT"]) for e in envs} == {("127.0.0.1", "4242")}
    assert {e["TORCH_NCCL_ASYNC_ERROR_HANDLING"] for e in envs} == {"1"}
    mine = rank_environments(options, placement, 1, "r", {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "0"})
    assert mine[0]["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "0"
