#!/usr/bin/env bash
# The nccl path, checked on a machine with NVIDIA GPUs (CI has none). One prepared run:
#   bash benchmarks/gpu_check.sh            (from the repository root; about 5 minutes)
# It installs the project, runs every solution notebook (nccl wherever a cell lets the
# course choose and each rank has a GPU), the launcher's GPU tests, lesson 04's exported
# script under torchrun with nccl (stopped after 2 epochs, resumed from its checkpoint) and
# lesson 05's FSDP2 script (a rank killed mid-run, the job resumed), then prints a short
# report. Exit status: 0 when every step passed.
# PY=python3 uses that Python and its CUDA torch (Kaggle, an image with torch in it); with
# PIP_NO_INDEX=1 too (a machine that reaches no package index), what the course needs must
# already be importable (docs/benchmarks.md: wheels carried in), and it is built offline.
set -uo pipefail
cd "$(dirname "$0")/.."
report=()
finish() {  # the report, and 0 when every step passed
  echo; echo "GPU check report ($gpus GPU(s), $(date -u +%F))"
  printf '%s\n' "${report[@]}"
  for line in "${report[@]}"; do [[ $line == FAIL* ]] && exit 1; done
  exit 0
}
step() {  # step NAME COMMAND...: run it, time it, remember PASS/FAIL
  local name=$1; shift
  local t0=$SECONDS log="/tmp/gpu_check_${name//[^A-Za-z0-9]/_}.log"  # a path in it: no /
  if "$@" > "$log" 2>&1; then
    report+=("PASS  $name ($((SECONDS - t0)) s)")
  else
    report+=("FAIL  $name ($((SECONDS - t0)) s): see $log")
  fi
}

gpus=$(nvidia-smi --list-gpus 2>/dev/null | wc -l)
echo "GPUs: $gpus"; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null
[ "$gpus" -ge 1 ] || { echo "no GPU found: nothing to check"; exit 1; }

# A CUDA build of the locked torch (the default wheel on Linux x86_64), as `make` installs it.
# A machine without network access needs .venv prepared beforehand (from carried wheels):
# then it is kept. PY=python3 uses that Python instead, e.g. a Kaggle notebook's, with the
# CUDA torch it comes with: the course goes into it without the lock, keeping that torch.
if [ -n "${PY:-}" ]; then
  PY=$(command -v "$PY") || { echo "PY=$PY: no such Python"; exit 1; }
  offline=(); [ -n "${PIP_NO_INDEX:-}" ] && offline=(--no-build-isolation)  # its setuptools
  step "install into $PY" "$PY" -m pip install -q ${offline[@]+"${offline[@]}"} \
    -e ".[grade]" nbclient nbval pytest
else
  if [ ! -x .venv/bin/python ]; then
    step "install" bash -c \
      'python3 -m venv .venv && .venv/bin/pip install -q -c constraints.txt -e ".[dev]"'
  fi
  PY=$PWD/.venv/bin/python
fi
$PY -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda)"
step "cuda visible to torch" $PY -c "import torch; assert torch.cuda.is_available(); print(torch.cuda.device_count())"
# From here on, the GPUs torch sees (CUDA_VISIBLE_DEVICES, MIG), not nvidia-smi's lines.
gpus=$($PY -c "import torch; print(torch.cuda.device_count())" 2>/dev/null) || gpus=0
echo "GPUs torch sees: $gpus"
[ "$gpus" -ge 1 ] || finish  # no step below can run

# Every solution notebook: a cell that lets the course choose its backend picks nccl when
# there is a GPU per rank (lesson 05's cells name gloo, all but its torchrun jobs). Outputs are
# not compared (they differ from the CPU record), errors fail.
step "solutions with nccl" $PY - <<'PYEOF'
import os, sys, time, nbformat
from nbclient import NotebookClient
os.environ["DDP_HELPERS_OUTPUT"] = "ordered"
for path in sorted(__import__("pathlib").Path("solutions").glob("0*.ipynb")):
    nb = nbformat.read(path, as_version=4)
    t = time.time()
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": "solutions"}}).execute()
    print(f"{path.name}: {time.time() - t:.1f} s")
PYEOF

step "launcher on nccl" $PY - <<PYEOF
import torch
from ddp_helpers import launch
n = $gpus
def check():
    import os, torch, torch.distributed as dist
    dist.init_process_group("nccl")
    assert torch.cuda.current_device() == int(os.environ["LOCAL_RANK"])
    t = torch.ones(1, device="cuda") * (dist.get_rank() + 1)
    dist.all_reduce(t)
    dist.destroy_process_group()
    return t  # comes back on the CPU
r = launch(check, nprocs=n, backend="auto", timeout=120)
assert all(x.device.type == "cpu" and x.item() == n * (n + 1) / 2 for x in r), r
print("nccl all_reduce on", n, "GPUs:", r[0].item())
PYEOF

# Two simulated machines: each must see only its own GPUs and pin cuda:LOCAL_RANK; with
# too few GPUs for that, the ranks must see none and run on gloo (never "Duplicate GPU").
step "simulated nodes on GPUs" $PY - <<PYEOF
from ddp_helpers import launch
n = $gpus
def where():
    import os, torch, torch.distributed as dist
    dist.init_process_group()  # no backend named: torch picks from what this rank sees
    t = torch.ones(1, device="cuda" if torch.cuda.is_available() else "cpu")
    dist.all_reduce(t)
    seen = os.environ.get("CUDA_VISIBLE_DEVICES"), torch.cuda.device_count()
    current = torch.cuda.current_device() if torch.cuda.is_available() else None
    dist.destroy_process_group()
    return int(os.environ["LOCAL_RANK"]), seen, current, t.item()
if n >= 2 and n % 2 == 0:
    r = launch(where, nprocs=n, nnodes=2, timeout=120)
    half = n // 2
    for rank, (local, (visible, count), current, total) in enumerate(r):
        assert count == half and current == local and total == n, r
        assert visible.split(",")[0] == str((rank // half) * half), r
    print("2 simulated nodes x", half, "GPUs:", [x[1][0] for x in r])
r = launch(where, nprocs=2 * (n // 2 + 1), nnodes=2, timeout=120)  # too few GPUs: none
assert all(count == 0 and current is None for _, (_, count), current, _ in r), r
print("too few GPUs: every rank on the CPU")
PYEOF

# Not -x: a test that assumed no GPU should not hide the ones after it.
step "pytest on the GPU machine" $PY -m pytest -q -p no:cacheprovider \
  tests/launcher/test_launch.py tests/launcher/test_faults.py tests/launcher/test_plan.py \
  tests/exercises/drawn/test_ex_5_1_torch.py

step "exported script under torchrun (nccl)" bash -c 'set -o pipefail
  d=$(mktemp -d) && '"$PY"' -m ddp_helpers export solutions/04_sampler_and_checkpoint.ipynb -o "$d/train.py" &&
  cd "$d" && '"$PY"' -m torch.distributed.run --standalone --nproc-per-node '"$gpus"' train.py --epochs 2 &&
  '"$PY"' -m torch.distributed.run --standalone --nproc-per-node '"$gpus"' train.py --epochs 4 | tee out.txt &&
  grep -q "resuming from checkpoint.pt at epoch 2" out.txt'

# Lesson 05's FSDP2 script (its Going further) with nccl, a rank per GPU (16 at most: its
# global batch is 16): the run whole, a run whose last rank dies as epoch 2's fourth step
# begins, that run started again; it must resume from epoch 1's snapshot and end as the
# whole one did, bit for bit. NCCL_DEBUG=INFO into a file (nccl's own stdout is not flushed
# by a process that leaves with os._exit) says that nccl ran.
step "lesson 05's FSDP2 script under torchrun (nccl)" $PY - <<PYEOF
import math, os, subprocess, sys, tempfile
from pathlib import Path
from ddp_helpers.demos import fsdp_job
folder = Path(tempfile.mkdtemp())
ranks = min($gpus, 16)
steps = math.ceil(math.ceil(96 / ranks) / (16 // ranks))  # an epoch's, on each rank
def torchrun(snapshots, **env):
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc-per-node", str(ranks), "--local-addr", "127.0.0.1",
               str(fsdp_job.SCRIPT), "--epochs", "4", "--snapshots", str(folder / snapshots)]
    logs = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_FILE": str(folder / f"nccl-{snapshots}.%h.%p")}
    env = {**os.environ, **fsdp_job.loopback_env(), **logs, **env}
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    print(run.stdout, end="")
    return run
whole = torchrun("whole")
assert whole.returncode == 0, whole.stderr[-3000:]
said = "".join(p.read_text(errors="replace") for p in folder.glob("nccl-whole.*"))
assert "NCCL INFO" in said, "nccl said nothing: the script ran on gloo"
cut = torchrun("cut", FAIL_AT_STEP=str(2 * steps + 3))  # epoch 2's fourth step
assert cut.returncode != 0, "the rank asked to die did not"
print(fsdp_job.torchrun_report(cut.stderr))
again = torchrun("cut")
assert again.returncode == 0 and "resuming from epoch-0001" in again.stdout, again.stderr[-3000:]
resumed = fsdp_job.losses(cut.stdout) | fsdp_job.losses(again.stdout)
assert resumed == fsdp_job.losses(whole.stdout), (resumed, fsdp_job.losses(whole.stdout))
assert fsdp_job.same_snapshot(folder / "whole" / "epoch-0003", folder / "cut" / "epoch-0003")
print("resumed as uninterrupted, last snapshots equal bit for bit, on nccl")
PYEOF

finish
