"""The exported job (`export --slurm`) under a real two-node SLURM (cluster/slurm.py): its
sbatch script as written, one torchrun per node and one task per rank, and a job cancelled
mid-run that resumes from its snapshot when submitted again."""

from __future__ import annotations

import sys
import time

import pytest
import torch
from cluster.slurm import POLL, Cluster

from ddp_helpers.authoring.export import export
from ddp_helpers.exercises.lesson04 import capstone
from support import ROOT, logged_losses

SOLUTION = ROOT / "solutions" / "04_sampler_and_checkpoint.ipynb"
EPOCHS = 4  # train.py's default
JOB = 180.0  # seconds a job of 4 ranks may take here, torch imported by 6 processes


@pytest.fixture(scope="module")
def job_folder(slurm_cluster):
    """The exported script and its sbatch script, on the cluster's shared storage."""
    folder = slurm_cluster.folder / "job"
    said = export(str(SOLUTION), str(folder / "train.py"), slurm=True)
    assert "sbatch " in said and (folder / "train.sbatch").exists()
    return folder


def _submit(c: Cluster, folder, snapshot: str, *sbatch_args: str, **env: str) -> str:
    """train.sbatch as a user submits it, from its folder; what else it needs from this
    machine: the interpreter, gloo on loopback, one thread per rank."""
    exported = {
        "PYTHON": sys.executable,
        "SNAPSHOT": str(folder / snapshot),
        "GLOO_SOCKET_IFNAME": "lo",
        "OMP_NUM_THREADS": "1",
        **env,
    }
    export_arg = "--export=ALL," + ",".join(f"{k}={v}" for k, v in exported.items())
    return c.submit(
        folder / "train.sbatch", f"--chdir={folder}", "--time=5", export_arg, *sbatch_args
    )


def _log(folder, job: str) -> str:
    path = folder / f"train-{job}.log"
    return path.read_text(errors="replace") if path.exists() else ""


def _weights_apart(path, epochs: int) -> float:
    saved = torch.load(path, map_location="cpu", weights_only=True)["model"]
    want = capstone.one_process_weights(epochs)
    return max((saved[k] - want[k]).abs().max().item() for k in want)


@pytest.mark.parametrize(
    ("launch", "sbatch_args", "started_by"),
    [
        ("torchrun", (), "4 ranks, started by torchrun"),
        ("tasks", ("--ntasks-per-node=2",), "4 ranks, started by SLURM, one task per rank"),
    ],
    ids=["torchrun per node", "one task per rank"],
)
def test_the_exported_job_runs_on_two_nodes_as_one_process_would(
    slurm_cluster,
    job_folder,
    launch,
    sbatch_args,
    started_by,
):
    c = slurm_cluster
    snapshot = f"{launch}.pt"
    job = _submit(c, job_folder, snapshot, *sbatch_args, LAUNCH=launch)
    state = c.wait(job, JOB)
    log = _log(job_folder, job)
    assert state == "COMPLETED", log + c.logs()
    assert f"2 nodes, rendezvous on n1 (127.0.0.1:{20000 + int(job) % 20000}), {launch}" in log
    assert started_by in log, log
    losses = logged_losses(log)
    assert len(losses) == EPOCHS, log
    want = capstone.one_process_losses(EPOCHS)
    assert max(abs(a - b) for a, b in zip(losses, want, strict=True)) < 1e-6, (losses, want)
    assert _weights_apart(job_folder / snapshot, EPOCHS) < 1e-6


def test_a_job_cancelled_mid_run_resumes_from_its_snapshot_when_submitted_again(
    slurm_cluster,
    job_folder,
):
    c = slurm_cluster
    snapshot = "cancelled.pt"
    first = _submit(c, job_folder, snapshot, HOLD_AT_EPOCH="2")
    deadline = time.monotonic() + JOB
    while "holding at epoch 2" not in _log(job_folder, first):  # epochs 0 and 1 saved
        assert c.state(first) in ("PENDING", "RUNNING", "CONFIGURING"), _log(job_folder, first)
        assert time.monotonic() < deadline, _log(job_folder, first) + c.logs()
        time.sleep(POLL)
    c.cancel(first)
    assert c.wait(first, 60) == "CANCELLED"
    first_two = pytest.approx(capstone.one_process_losses(2), abs=1e-6)
    assert logged_losses(_log(job_folder, first))[:2] == first_two
    second = _submit(c, job_folder, snapshot)
    assert c.wait(second, JOB) == "COMPLETED", _log(job_folder, second)
    log = _log(job_folder, second)
    assert f"resuming from {job_folder / snapshot} at epoch 2: epochs 2 to 3 left" in log, log
    assert [line.split(":")[0] for line in log.splitlines() if line.startswith("epoch ")] == [
        "epoch 2",
        "epoch 3",
    ]
    assert _weights_apart(job_folder / snapshot, 4) < 1e-6  # as if never interrupted
    assert not (job_folder / f"{snapshot}.tmp").exists()


def test_a_requeued_job_resumes_from_its_snapshot_in_the_same_job(slurm_cluster, job_folder):
    """What --requeue is for: a job preempted (here `scontrol requeue`, as the scheduler
    does) runs again under the same id, appends to its log and goes on from its snapshot;
    the held epoch holds on the first start only (SLURM_RESTART_COUNT)."""
    c = slurm_cluster
    snapshot = "requeued.pt"
    job = _submit(c, job_folder, snapshot, HOLD_AT_EPOCH="2")
    deadline = time.monotonic() + JOB
    while "holding at epoch 2" not in _log(job_folder, job):
        assert time.monotonic() < deadline, _log(job_folder, job) + c.logs()
        time.sleep(POLL)
    c.requeue(job)
    assert c.wait(job, JOB) == "COMPLETED", _log(job_folder, job)  # cred_expire, then again
    log = _log(job_folder, job)
    assert f"job {job}, start 0:" in log and f"job {job}, start 1:" in log, log
    assert f"resuming from {job_folder / snapshot} at epoch 2: epochs 2 to 3 left" in log, log
    assert [x.split(":")[0] for x in log.splitlines() if x.startswith("epoch ")] == [
        "epoch 0",
        "epoch 1",
        "epoch 2",
        "epoch 3",
    ]
    assert _weights_apart(job_folder / snapshot, EPOCHS) < 1e-6
    assert c.job(job)["Restarts"] == "1"
