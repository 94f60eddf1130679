"""`python -m ddp_helpers export`: lesson 04's capstone as a torchrun job that resumes."""

from __future__ import annotations

import contextlib
import io
import os
import runpy
import subprocess
import sys

import pytest
import torch

from ddp_helpers.exercises.lesson04 import capstone
from support import ROOT, setup_on_a_machine

SOLUTION = ROOT / "solutions" / "04_sampler_and_checkpoint.ipynb"
LESSON = ROOT / "lessons" / "04_sampler_and_checkpoint.ipynb"

# Started before the script in every process of the run (PYTHONPATH), it logs each
# torch.save with the global rank that called it: who wrote the checkpoint, how often.
SAVE_SPY = """\
import os

import torch

_real_save = torch.save


def _logged_save(obj, f, *args, **kwargs):
    with open(os.environ["SAVES_LOG"], "a") as log:
        log.write(f"{os.environ.get('RANK')} {f}\\n")
    return _real_save(obj, f, *args, **kwargs)


torch.save = _logged_save
"""

# Started in every process of a run (PYTHONPATH): the machine one-GPU-per-task scheduling
# gives each rank, CUDA there but one GPU visible to the process, however many ranks it has.
ONE_GPU_VISIBLE = """\
import torch

torch.cuda.is_available = lambda: True
torch.cuda.device_count = lambda: 1
"""
WARNING = "warning: CUDA is available, but this process sees"


def export(notebook, out):
    """`python -m ddp_helpers export NOTEBOOK -o OUT`, as the command line runs it."""
    from ddp_helpers.__main__ import main

    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main(["export", str(notebook), "-o", str(out)])
    return subprocess.CompletedProcess([], code, stdout.getvalue(), stderr.getvalue())


def torchrun(script, *args, env=None, restarts=0):
    """The script under `torchrun --standalone --nproc-per-node 2`, on loopback: its output."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            "--max-restarts",
            str(restarts),
            script.name,
            *args,
        ],
        cwd=script.parent,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, OMP_NUM_THREADS="1", **(env or {})),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def weights_diff(saved, reference):
    assert saved.keys() == reference.keys()  # the plain model's keys: no `module.`
    return max((saved[k] - reference[k]).abs().max().item() for k in reference)


def epoch_lines(stdout):
    return [line for line in stdout.splitlines() if line.startswith(("epoch ", "resuming "))]


@pytest.fixture(scope="module")
def two_epochs(tmp_path_factory):
    """The solved capstone exported and run for 2 epochs under torchrun, with every
    torch.save logged: (its folder, the export's output, the run's output)."""
    folder = tmp_path_factory.mktemp("capstone")
    script = folder / "train.py"
    exported = export(SOLUTION, script)
    assert exported.returncode == 0, exported.stderr
    spy = folder / "spy"
    spy.mkdir()
    (spy / "sitecustomize.py").write_text(SAVE_SPY)
    env = {"PYTHONPATH": str(spy), "SAVES_LOG": str(folder / "saves.log")}
    return folder, exported, torchrun(script, "--epochs", "2", "--checkpoint", "ckpt.pt", env=env)


def test_the_exported_capstone_runs_under_torchrun_saves_once_and_equals_one_process(two_epochs):
    folder, exported, run = two_epochs
    assert "torchrun --standalone --nproc-per-node 2" in exported.stdout
    assert WARNING not in run.stderr  # no CUDA here: nothing to warn about

    # Rank 0 alone wrote, once after each epoch, beside the path given on the command line,
    # then moved it there (no .tmp is left); and rank 0 alone said each epoch's loss.
    assert (folder / "saves.log").read_text().splitlines() == ["0 ckpt.pt.tmp", "0 ckpt.pt.tmp"]
    assert sorted(p.name for p in folder.iterdir()) == ["ckpt.pt", "saves.log", "spy", "train.py"]
    lines = epoch_lines(run.stdout)
    assert [line.split(":")[0] for line in lines] == ["epoch 0", "epoch 1"], run.stdout
    assert all(line.endswith("over 96 examples") for line in lines), lines  # all ranks' share
    snapshot = torch.load(folder / "ckpt.pt", map_location="cpu", weights_only=True)
    assert snapshot.keys() == {"model", "optimizer", "epoch"} and snapshot["epoch"] == 1
    reference = capstone.one_process_weights(2)  # one process, the same global batches
    diff = weights_diff(snapshot["model"], reference)
    assert diff < 1e-6, diff


def test_the_logged_loss_is_the_mean_over_every_rank_and_batch(two_epochs):
    _, _, run = two_epochs
    logged = float(epoch_lines(run.stdout)[0].split("loss ")[1].split()[0])
    # One process on epoch 0's 6 global batches of 16, each batch's loss before its step.
    (want,) = capstone.one_process_losses(1)
    assert abs(logged - want) < 1e-6, (logged, want)


def test_a_rank_killed_mid_training_is_restarted_by_torchrun_and_the_job_resumes(tmp_path):
    script = tmp_path / "train.py"
    assert export(SOLUTION, script).returncode == 0
    # FAIL_AT_EPOCH: the script's own injected failure (rank 1, as epoch 2 begins, on the
    # first start only). The store variable: a new store for each start (the script's
    # warning and lesson 04 say why; benchmarks/torchrun_restart.py measures it).
    env = {"FAIL_AT_EPOCH": "2", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    run = torchrun(script, "--epochs", "4", env=env, restarts=1)
    assert "rank 1: dying at epoch 2 (FAIL_AT_EPOCH)" in run.stderr, run.stderr
    assert [line.split(":")[0] for line in epoch_lines(run.stdout)] == [
        "epoch 0",
        "epoch 1",
        "resuming from checkpoint.pt at epoch 2",
        "epoch 2",
        "epoch 3",
    ], run.stdout
    snapshot = torch.load(tmp_path / "checkpoint.pt", map_location="cpu", weights_only=True)
    assert snapshot["epoch"] == 3
    # The weights of a run that never failed: one process on the same global batches (the
    # first test shows DDP equal to it), 1e-6.
    diff = weights_diff(snapshot["model"], capstone.one_process_weights(4))
    assert diff < 1e-6, diff
    again = torchrun(script, "--epochs", "4")  # a finished job, started again: no training
    assert epoch_lines(again.stdout) == [
        "resuming from checkpoint.pt at epoch 4: all 4 epochs done (delete it to start over)"
    ]


@pytest.mark.parametrize(
    ("restarts", "agent_store", "rank", "rendezvous", "warned"),
    [
        ("1", "True", "0", "c10d", True),
        ("1", "True", "0", None, True),  # not Linux: cannot tell, so it warns
        ("0", "True", "0", "c10d", False),
        ("1", "False", "0", "c10d", False),
        ("1", "True", "1", "c10d", False),
        # Static (torchrun's default): its agent keeps one store for every start, whatever
        # the variable says (lesson 04, benchmarks/torchrun_restart.py): warned all the same.
        ("1", "True", "0", "static", True),
        ("0", "True", "0", "static", False),  # no restart, nothing to warn about
    ],
)
def test_the_script_warns_when_a_restart_would_meet_on_the_failed_starts_store(
    tmp_path, monkeypatch, capsys, restarts, agent_store, rank, rendezvous, warned
):
    script = tmp_path / "train.py"
    assert export(SOLUTION, script).returncode == 0
    main = runpy.run_path(str(script), run_name="exported")["main"]
    monkeypatch.setitem(main.__globals__, "train_job", lambda *args: None)
    monkeypatch.setitem(main.__globals__, "torchrun_rendezvous", lambda: rendezvous)
    env = {
        "RANK": rank,
        "LOCAL_RANK": rank,
        "WORLD_SIZE": "2",
        "LOCAL_WORLD_SIZE": "2",
        "TORCHELASTIC_MAX_RESTARTS": restarts,
        "TORCHELASTIC_USE_AGENT_STORE": agent_store,
    }
    monkeypatch.setattr(os, "environ", dict(os.environ, **env))
    monkeypatch.setattr(sys, "argv", ["train.py"])
    monkeypatch.setattr(os, "_exit", lambda code: None)  # main()'s end: the test goes on
    main()
    err = capsys.readouterr().err
    if warned:
        assert err.startswith("warning: torchrun may restart this job") and err.count("\n") == 1
        assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" in err and "#167288" in err
        assert ("--rdzv-backend c10d" in err) == (rendezvous == "static")
    else:
        assert err == ""


def test_the_script_is_the_learners_code_without_the_course(tmp_path):
    script = tmp_path / "train.py"
    assert export(SOLUTION, script).returncode == 0
    text = script.read_text()
    lines = text.splitlines()
    assert not [line for line in lines if "import" in line and "ddp_helpers" in line]
    assert "SOLUTION" not in text and "%load_ext" not in text
    code = runpy.run_path(str(script), run_name="exported")
    for name in ("setup", "cleanup", "wrap", "make_loader", "train_job", "main"):
        assert callable(code[name]), name
    # The notebook's one-process script and the capstone's train_ddp, which train_job grows
    # from, stay in the notebook: the script holds no code it does not run.
    assert "train_one_process" not in code and "train_ddp" not in code


@pytest.mark.parametrize(
    ("gpus", "local_world", "backend"),
    [(8, "8", "nccl"), (4, "8", "gloo"), (0, "2", "gloo")],
)
def test_the_script_picks_nccl_by_the_gpus_of_its_own_machine(
    tmp_path, monkeypatch, gpus, local_world, backend
):
    # 2 nodes x 8 ranks: WORLD_SIZE 16, but each machine needs only its own 8 GPUs.
    script = tmp_path / "train.py"
    assert export(SOLUTION, script).returncode == 0
    code = runpy.run_path(str(script), run_name="exported")
    chosen, device = setup_on_a_machine(monkeypatch, code["setup"], gpus, local_world)
    # nccl with device_id= this rank's GPU (without it, barrier() warns); gloo without one.
    assert chosen == [("nccl", "cuda:1") if backend == "nccl" else ("gloo", "None")]
    assert device == ("cuda:1" if backend == "nccl" else "cpu")


@pytest.mark.parametrize(
    ("cuda", "gpus", "rank", "warned"),
    [(True, 1, "0", True), (True, 2, "0", False), (False, 0, "0", False), (True, 1, "1", False)],
)
def test_the_script_warns_before_training_when_cuda_is_there_but_gloo_is_picked(
    tmp_path, monkeypatch, capsys, cuda, gpus, rank, warned
):
    # 2 ranks on the machine: 1 GPU visible is one GPU per task; 2 is nccl; no CUDA, no word.
    script = tmp_path / "train.py"
    assert export(SOLUTION, script).returncode == 0
    main = runpy.run_path(str(script), run_name="exported")["main"]
    said_before_training = []  # what the script printed by the time it began to train
    train = lambda *args: said_before_training.append(capsys.readouterr())  # noqa: E731
    monkeypatch.setitem(main.__globals__, "train_job", train)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    env = {"RANK": rank, "LOCAL_RANK": rank, "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}
    monkeypatch.setattr(os, "environ", dict(os.environ, **env))
    monkeypatch.setattr(sys, "argv", ["train.py", "--epochs", "1"])
    ended = []  # main() ends the process with os._exit: here it only records the call
    monkeypatch.setattr(os, "_exit", ended.append)
    main()
    assert ended == [0]
    (said,) = said_before_training
    assert said.out == ("2 ranks, started by torchrun\n" if rank == "0" else "")
    if warned:
        assert said.err.startswith(WARNING) and said.err.count("\n") == 1, said.err
        assert "sees 1 GPU(s) for LOCAL_WORLD_SIZE=2 ranks" in said.err
        assert "pick_backend() chose gloo and the job trains on the CPU" in said.err
        assert "CUDA_VISIBLE_DEVICES per rank, e.g. SLURM --gpus-per-task=1" in said.err
    else:
        assert said.err == ""


def test_under_torchrun_one_gpu_per_task_is_said_once_and_the_job_still_trains(tmp_path):
    script = tmp_path / "train.py"
    assert export(SOLUTION, script).returncode == 0
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "sitecustomize.py").write_text(ONE_GPU_VISIBLE)
    run = torchrun(script, "--epochs", "1", env={"PYTHONPATH": str(fake)})
    warnings = [line for line in run.stderr.splitlines() if WARNING in line]
    assert len(warnings) == 1, run.stderr[-3000:]  # rank 0's, not one per rank
    assert "sees 1 GPU(s) for LOCAL_WORLD_SIZE=2 ranks" in warnings[0]
    assert (tmp_path / "checkpoint.pt").exists()  # trained on the CPU, with gloo


def test_the_script_name_goes_in_its_header_and_nowhere_else(tmp_path):
    import nbformat

    nb = nbformat.read(SOLUTION, as_version=4)
    cell = next(c for c in nb.cells if "export" in c.metadata.get("tags", []))
    cell.source += '\nLOG = "train.py.log"  # the learner\'s own text\n'
    notebook = tmp_path / "04_sampler_and_checkpoint.ipynb"
    nbformat.write(nb, notebook)
    result = export(notebook, tmp_path / "job.py")
    assert result.returncode == 0, result.stderr
    script = (tmp_path / "job.py").read_text()
    assert "torchrun --standalone --nproc-per-node 2 job.py" in script
    assert 'LOG = "train.py.log"' in script


def test_imports_are_grouped_standard_library_first():
    from ddp_helpers.authoring.export import _import_block

    block = _import_block(["import torch", "import os, sys", "from pathlib import Path"])
    assert block == "import os, sys\nfrom pathlib import Path\n\nimport torch"


def test_exporting_an_unfinished_lesson_names_the_missing_exercises(tmp_path):
    result = export(LESSON, tmp_path / "train.py")
    assert result.returncode == 2
    named = "exercise 4.2 and exercises 2.1 and 2.2 from lesson 02"
    assert f"needs {named}," in result.stderr, result.stderr
    assert "paste your answers from the earlier lessons" in result.stderr
    assert not (tmp_path / "train.py").exists()


def test_a_lesson_whose_own_exercises_are_done_asks_only_for_the_pasted_ones(tmp_path):
    import nbformat

    nb = nbformat.read(LESSON, as_version=4)
    solved = nbformat.read(SOLUTION, as_version=4)
    answers = {c.source.split("(")[0]: c.source for c in solved.cells if c.cell_type == "code"}
    for cell in nb.cells:
        head = cell.source.split("(")[0]
        if cell.cell_type == "code" and head == "def make_loader":
            cell.source = answers[head]
    notebook = tmp_path / "04_sampler_and_checkpoint.ipynb"
    nbformat.write(nb, notebook)
    result = export(notebook, tmp_path / "train.py")
    assert result.returncode == 2
    named = "exercises 2.1 and 2.2 from lesson 02"
    assert f"needs {named}," in result.stderr, result.stderr
    assert "Paste your answers from the earlier lessons" in result.stderr


def test_a_notebook_without_export_tags_gets_a_clear_error(tmp_path):
    result = export(ROOT / "solutions" / "01_rank_and_world_size.ipynb", tmp_path / "t.py")
    assert result.returncode == 2 and "no cells tagged `export`" in result.stderr


def test_a_missing_notebook_is_a_clear_error(tmp_path):
    result = export(tmp_path / "nowhere.ipynb", tmp_path / "t.py")
    assert result.returncode == 2 and "No such file" in result.stderr


@pytest.mark.parametrize("edition", ["en", "ja"])
def test_each_editions_export_command_as_written_exports_its_own_solved_lesson(tmp_path, edition):
    """The command *From notebook to script* shows, read from the built lesson of each
    edition and run as written from the course's folder: it names that edition's own
    notebook (a Japanese learner's is lessons/ja/...), and on a solved copy it succeeds."""
    import re
    import shlex
    import shutil

    import nbformat

    folder = "" if edition == "en" else edition
    lesson = ROOT / "lessons" / folder / LESSON.name
    command = re.compile(r"^python -m ddp_helpers export .*$", re.M)
    shown = [
        found.group(0)
        for cell in nbformat.read(lesson, as_version=4).cells
        if cell.cell_type == "markdown" and (found := command.search(cell.source))
    ]
    assert len(shown) == 1, shown
    args = shlex.split(shown[0])
    named = args[args.index("export") + 1]
    assert named == lesson.relative_to(ROOT).as_posix(), shown[0]
    (tmp_path / named).parent.mkdir(parents=True)
    shutil.copy(ROOT / "solutions" / folder / LESSON.name, tmp_path / named)  # solved
    run = subprocess.run(
        [sys.executable, *args[1:]],  # `python` is the course's own
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith(f"wrote {args[args.index('-o') + 1]} "), run.stdout
    assert "def main(" in (tmp_path / args[args.index("-o") + 1]).read_text()


RENDEZVOUS = """\
import runpy

found = runpy.run_path("train.py", run_name="not_main")["torchrun_rendezvous"]()
print(f"rendezvous {found}\\n", end="", flush=True)
"""


@pytest.mark.parametrize(
    ("args", "rendezvous"),
    [
        (["--standalone"], "c10d"),
        (["--rdzv-backend=c10d", "--rdzv-endpoint", "127.0.0.1:0"], "c10d"),
        (["--master-addr", "127.0.0.1", "--master-port", "0"], "static"),
    ],
    ids=["standalone", "c10d", "static"],
)
def test_the_script_reads_torchruns_rendezvous_from_its_agent(tmp_path, args, rendezvous):
    assert export(SOLUTION, tmp_path / "train.py").returncode == 0
    (tmp_path / "which.py").write_text(RENDEZVOUS)
    run = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", *args, "--nproc-per-node", "1"]
        + ["which.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert f"rendezvous {rendezvous}" in run.stdout, run.stderr[-2000:]


@pytest.mark.parametrize(
    ("tasks", "node", "here"), [("2(x3),1", "2", "2"), ("2(x3),1", "3", "1"), ("4", "0", "4")]
)
def test_one_task_per_rank_reads_slurms_variables(tmp_path, monkeypatch, tasks, node, here):
    script = tmp_path / "train.py"
    assert export(SOLUTION, script).returncode == 0
    code = runpy.run_path(str(script), run_name="exported")
    slurm = {
        "SLURM_PROCID": "5",
        "SLURM_NTASKS": "7",
        "SLURM_LOCALID": "1",
        "SLURM_STEP_TASKS_PER_NODE": tasks,
        "SLURM_NODEID": node,
        "SLURM_JOB_ID": "123456",
        "MASTER_ADDR": "10.0.0.7",  # the sbatch script's: no scontrol call then
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "LOCAL_", "WORLD"))}
    monkeypatch.setattr(os, "environ", dict(env, **slurm))
    assert code["launched_by"]().startswith("SLURM, one task per rank")
    got = {k: os.environ[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")}
    assert got == {"RANK": "5", "WORLD_SIZE": "7", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": here}
    assert (os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]) == ("10.0.0.7", "23456")


def test_a_script_started_by_no_launcher_says_how_to_start_it(tmp_path):
    script = tmp_path / "train.py"
    assert export(SOLUTION, script).returncode == 0
    keep = ("PATH", "HOME", "PYTHONPATH")
    env = {k: v for k, v in os.environ.items() if k in keep}
    run = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 1 and run.stdout == ""
    assert run.stderr.startswith("train.py: start it with torchrun, with srun"), run.stderr
    assert "Traceback" not in run.stderr


def test_the_command_line_writes_the_cluster_files_beside_the_script(tmp_path):
    from ddp_helpers.__main__ import main

    out = tmp_path / "jobs" / "train.py"  # a folder not there yet is made
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        assert main(["export", str(SOLUTION), "-o", str(out), "--slurm", "--kubernetes"]) == 0
    said = stdout.getvalue().splitlines()
    assert said[0].startswith(f"wrote {out} (5 cells)")
    assert (
        said[1] == f"wrote {out.with_suffix('.sbatch')}: a SLURM job for it; submit it with: "
        f"sbatch {out.with_suffix('.sbatch')}"
    )
    assert [line.split(":")[0] for line in said[2:]] == [
        f"wrote {tmp_path / 'jobs' / 'train.pytorchjob.yaml'}",
        f"wrote {tmp_path / 'jobs' / 'train.trainjob.yaml'}",
    ]
    sbatch = out.with_suffix(".sbatch").read_text()
    assert "@" not in sbatch.replace("$@", "")  # every placeholder filled
    assert "#SBATCH --job-name=train" in sbatch and "--requeue" in sbatch
    assert subprocess.run(["bash", "-n", str(out.with_suffix(".sbatch"))]).returncode == 0
