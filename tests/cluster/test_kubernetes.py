"""The exported job under Kubernetes, by the contract of Kubeflow's operators: no cluster
runs here, so each "pod" is a process on loopback given exactly the environment the
operator gives its pod, and the manifests the export writes are checked for what the
operators require.

PyTorchJob (Training Operator v1), one process per pod: MASTER_ADDR, MASTER_PORT,
WORLD_SIZE (the pods) and RANK (Master 0, Worker i i + 1). With nprocPerNode, the operator
runs torchrun in each pod with PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK,
PET_MASTER_ADDR, PET_MASTER_PORT beside the pod's WORLD_SIZE and RANK, which count pods
(kubeflow/trainer#1790): torchrun's own variables must win. TrainJob (Trainer v2) gives
torchrun the same PET_* variables.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest
import torch
import yaml

from ddp_helpers.authoring.export import export
from ddp_helpers.exercises.lesson04 import capstone
from support import ROOT, logged_losses

SOLUTION = ROOT / "solutions" / "04_sampler_and_checkpoint.ipynb"
EPOCHS = 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    folder = tmp_path_factory.mktemp("k8s")
    said = export(str(SOLUTION), str(folder / "train.py"), kubernetes=True)
    return folder, said


def _pods(folder, command, envs, timeout=240):
    """Start one process per pod with exactly the operator's variables (and what any
    container has: PATH, HOME); their outputs, once all have ended."""
    base = {k: os.environ[k] for k in ("PATH", "HOME") if k in os.environ}
    base.update(OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo", PYTHONUNBUFFERED="1")
    procs = [
        subprocess.Popen(
            command,
            cwd=folder,
            env={**base, **env},
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for env in envs
    ]
    try:
        outs = [p.communicate(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait()
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-3000:]
    return outs


def test_a_pytorchjob_of_one_process_per_pod_trains_as_one_process(exported):
    folder, _ = exported
    port = str(_free_port())
    pods = [  # the Master and one Worker, as the operator sets them
        {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "WORLD_SIZE": "2", "RANK": str(r)}
        for r in (0, 1)
    ]
    command = [sys.executable, "train.py", "--epochs", str(EPOCHS), "--checkpoint", "pod.pt"]
    (master, _), (worker, _) = _pods(folder, command, pods)
    assert master.splitlines()[0] == (
        "2 ranks, started by a pod of a PyTorchJob (RANK, WORLD_SIZE; one process per pod)"
    )
    assert worker == ""  # rank 0 alone logs
    logged = logged_losses(master)
    assert len(logged) == EPOCHS
    want = capstone.one_process_losses(EPOCHS)
    assert max(abs(a - b) for a, b in zip(logged, want, strict=True)) < 1e-6
    snapshot = torch.load(folder / "pod.pt", map_location="cpu", weights_only=True)
    weights = capstone.one_process_weights(EPOCHS)
    assert max((snapshot["model"][k] - weights[k]).abs().max().item() for k in weights) < 1e-6


def test_with_nproc_per_node_torchrun_counts_processes_not_pods(exported):
    folder, _ = exported
    port = str(_free_port())
    # 2 pods of 2 processes: the pods' WORLD_SIZE says 2, the job has 4 ranks.
    pods = [
        {
            "PET_NNODES": "2",
            "PET_NPROC_PER_NODE": "2",
            "PET_NODE_RANK": str(r),
            "PET_MASTER_ADDR": "127.0.0.1",
            "PET_MASTER_PORT": port,
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
            "WORLD_SIZE": "2",
            "RANK": str(r),
        }
        for r in (0, 1)
    ]
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "train.py",
        "--epochs",
        str(EPOCHS),
        "--checkpoint",
        "pet.pt",
    ]
    (first, _), (second, _) = _pods(folder, command, pods)
    assert first.splitlines()[0] == "4 ranks, started by torchrun", first
    assert "started by" not in second
    logged = logged_losses(first)
    assert [
        line.endswith("over 96 examples")
        for line in first.splitlines()
        if line.startswith("epoch ")
    ] == [True] * EPOCHS
    want = capstone.one_process_losses(EPOCHS)
    assert max(abs(a - b) for a, b in zip(logged, want, strict=True)) < 1e-6


def test_the_manifests_have_what_the_operators_require(exported):
    folder, said = exported
    assert "train.pytorchjob.yaml" in said and "kubectl apply -f" in said
    job = yaml.safe_load((folder / "train.pytorchjob.yaml").read_text())
    assert (job["apiVersion"], job["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    assert job["metadata"]["name"] == "train"
    specs = job["spec"]["pytorchReplicaSpecs"]
    assert set(specs) == {"Master", "Worker"} and specs["Master"]["replicas"] == 1
    for spec in specs.values():
        (container,) = spec["template"]["spec"]["containers"]
        assert container["name"] == "pytorch"  # the operator's default container name
        assert container["image"] and container["command"][:2] == ["python", "/workspace/train.py"]
        assert "/snapshots/checkpoint.pt" in container["command"]
        mounts = {m["name"] for m in container["volumeMounts"]}
        volumes = {v["name"] for v in spec["template"]["spec"]["volumes"]}
        assert mounts <= volumes  # every mount has its volume
        assert spec["restartPolicy"] in ("OnFailure", "Always", "ExitCode", "Never")
    trainjob = yaml.safe_load((folder / "train.trainjob.yaml").read_text())
    assert (trainjob["apiVersion"], trainjob["kind"]) == (
        "trainer.kubeflow.org/v1alpha1",
        "TrainJob",
    )
    assert trainjob["spec"]["runtimeRef"]["name"] == "torch-distributed"
    trainer = trainjob["spec"]["trainer"]
    assert trainer["command"][:2] == ["torchrun", "/workspace/train.py"]
    assert trainer["numNodes"] >= 1 and trainer["image"]


def test_a_job_name_kubernetes_accepts_comes_from_any_script_name(tmp_path):
    export(str(SOLUTION), str(tmp_path / "My_Train.v2.py"), kubernetes=True)
    job = yaml.safe_load((tmp_path / "My_Train.v2.pytorchjob.yaml").read_text())
    assert job["metadata"]["name"] == "my-train-v2"
    assert (
        "/workspace/My_Train.v2.py"
        in job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0][
            "command"
        ]
    )
