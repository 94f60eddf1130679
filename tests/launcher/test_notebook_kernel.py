"""The launcher and %%ddp inside a real kernel: output reaches the cell, errors read well."""

from __future__ import annotations

import re
import time

import pytest
from jupyter_client import KernelManager

from kernel_utils import descendants, error_of, run_cells, shown, stream_text
from support import SOON

DEFINE = """
import os
from ddp_helpers import launch, DistributedError

def who(scale):
    rank = int(os.environ["RANK"])
    print(f"I am rank {rank} of {os.environ['WORLD_SIZE']}")
    return rank * scale
"""


BASIC = (
    DEFINE,
    "r = launch(who, 10, nprocs=2)\nprint(list(r))",
    "r = launch(who, 10, nprocs=3)\nprint(list(r), r.rank0)",
    # A failing rank: its traceback names the notebook cell and shows the line.
    "def bad():\n    x = int(os.environ['RANK'])\n    if x == 1:\n"
    "        raise ValueError(f'rank {x} is unhappy')\n    return x\n\nlaunch(bad, nprocs=2)",
    "import time\ndef stuck():\n    time.sleep(50)\n\nlaunch(stuck, nprocs=2, timeout=2)",
    "launch(who, 1, nprocs=2)",  # the next launch after two failures works
)


def test_notebook_defined_function_runs_on_two_and_three_ranks(basic_run):
    two, three = basic_run[1], basic_run[2]
    out2 = stream_text(two)
    assert "[rank 0] I am rank 0 of 2\n" in out2 and "[rank 1] I am rank 1 of 2\n" in out2
    assert out2.endswith("[0, 10]\n")
    out3 = stream_text(three)
    for rank in range(3):
        assert f"[rank {rank}] I am rank {rank} of 3\n" in out3
    assert out3.endswith("[0, 10, 20] 0\n")


def test_a_failing_rank_shows_its_notebook_traceback_in_the_cell(basic_run):
    err = error_of(basic_run[3])
    assert err["ename"] == "DistributedError"
    assert (
        err["evalue"]
        == "rank 1 raised ValueError: rank 1 is unhappy. The other ranks were stopped."
    )
    text = shown(err)
    assert "rank 1 raised ValueError: rank 1 is unhappy" in text
    assert re.search(r"Cell In\[4\], line 4, in bad", text), text
    assert "raise ValueError(f'rank {x} is unhappy')" in text


def test_a_timeout_shows_each_ranks_stack_in_the_notebook_cell(basic_run):
    text = shown(error_of(basic_run[4]))
    assert "did not finish within 2 s" in text
    for rank in (0, 1):
        block = text.split(f"rank {rank}:\n", 1)[1]
        assert re.match(r"  Cell In\[5\], line 3, in stuck\n    time.sleep\(50\)", block), block


def test_the_next_launch_works_after_failures(basic_run):
    assert "[rank 1] I am rank 1 of 2" in stream_text(basic_run[5])
    assert error_of(basic_run[5]) is None


MAGIC = (
    "%load_ext ddp_helpers\nsteps = 3",
    "%%ddp -n 2\nimport torch, torch.distributed as dist\ndist.init_process_group('gloo')\n"
    "t = torch.tensor([dist.get_rank() + 1])\ndist.all_reduce(t)\n"
    "print(f'rank {dist.get_rank()}: sum={t.item()} steps={steps}')\n"
    "dist.destroy_process_group()",
    "%%ddp -n 3 --ordered\nimport os, sys\nprint('out', os.environ['RANK'])\n"
    "print('err', os.environ['RANK'], file=sys.stderr)",
    "%%ddp -n 2\nimport os\n\nif os.environ['RANK'] == '0':\n    1 / 0",
    "%%ddp -n 2 --timeout 2\nimport time\ntime.sleep(30)",
    "%%ddp -n 0\nprint('never')",
    "%%ddp --backend mpi\nprint('never')",
    "import threading\nlock = threading.Lock()",
    "%%ddp -n 2\nprint(lock)",
    "%%ddp -n 4 --nnodes 2 --ordered\nimport os\n"
    "print(os.environ['GROUP_RANK'], os.environ['LOCAL_RANK'], os.environ['LOCAL_WORLD_SIZE'])",
    "%%ddp -n 3 --nnodes 2\nprint('never')",
)


@pytest.fixture(scope="module")
def kernel_run():
    """Every cell above, in one kernel: the launch cells first, then the magic's."""
    return run_cells(*BASIC, *MAGIC)


@pytest.fixture(scope="module")
def basic_run(kernel_run):
    return kernel_run[: len(BASIC)]


@pytest.fixture(scope="module")
def magic_run(kernel_run):
    return kernel_run[len(BASIC) :]


def test_magic_runs_the_cell_on_every_rank_with_notebook_variables(magic_run):
    out = stream_text(magic_run[1])
    assert "[rank 0] rank 0: sum=3 steps=3\n" in out
    assert "[rank 1] rank 1: sum=3 steps=3\n" in out


def test_magic_routes_stderr_and_orders_when_asked(magic_run):
    assert stream_text(magic_run[2]) == "".join(f"[rank {r}] out {r}\n" for r in range(3))
    assert stream_text(magic_run[2], "stderr") == "".join(f"[rank {r}] err {r}\n" for r in range(3))


def test_magic_error_points_at_the_cells_own_line(magic_run):
    err = error_of(magic_run[3])
    assert err["ename"] == "DistributedError"
    assert "rank 0 raised ZeroDivisionError: division by zero" in err["evalue"]
    assert "Cell In[10], line 5, in <module>\n    1 / 0" in shown(err)


def test_magic_timeout_shows_the_cells_line(magic_run):
    text = shown(error_of(magic_run[4]))
    assert "Cell In[11], line 3, in <module>\n    time.sleep(30)" in text


def test_magic_bad_options_are_usage_errors(magic_run):
    # IPython shows a magic's UsageError as one line, without a traceback.
    assert stream_text(magic_run[5], "stderr") == (
        "UsageError: nprocs must be a whole number of ranks, 1 or more; got 0.\n"
    )
    assert "UsageError: backend must be 'auto', 'gloo' or 'nccl'" in stream_text(
        magic_run[6], "stderr"
    )
    assert "never" not in stream_text(magic_run[5]) + stream_text(magic_run[6])


def test_magic_names_a_notebook_variable_it_could_not_send(magic_run):
    text = shown(error_of(magic_run[8]))
    assert "name 'lock' is not defined" in text
    assert "`lock` exists in the notebook but could not be sent" in text


def _wait_idle(kc, msg_id, timeout):
    """Collect iopub messages of one execution until the kernel is idle again."""
    outputs, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg = kc.get_iopub_msg(timeout=deadline - time.monotonic())
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] in ("stream", "error"):
            outputs.append(msg["content"])
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return outputs
    raise TimeoutError("kernel did not become idle")


FOREVER = (
    "from ddp_helpers import launch\nimport time\n"
    "def forever():\n    print('started', flush=True)\n    time.sleep(600)\n"
    "launch(forever, nprocs=2)"
)


def _until_ranks(kernel: int, count: int = 2) -> list:
    """Wait until the kernel `kernel` has `count` rank processes; its descendants then."""
    deadline = time.monotonic() + SOON
    while True:
        family = descendants(kernel)
        if sum(p.name().startswith("ddp-rank") for p in family) >= count:
            return family
        assert time.monotonic() < deadline, f"no {count} ranks: {family}"
        time.sleep(0.01)


def _until_started(kc) -> None:
    while True:
        msg = kc.get_iopub_msg(timeout=60)
        if msg["msg_type"] == "stream" and "started" in msg["content"]["text"]:
            return


def test_interrupt_stops_every_rank_within_two_seconds_and_a_killed_kernel_leaves_none():
    km = KernelManager(kernel_name="python3")
    km.start_kernel()
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
        msg_id = kc.execute(FOREVER)
        _until_started(kc)
        ranks = [p for p in _until_ranks(km.provisioner.process.pid) if "rank" in p.name()]
        assert sorted(p.name() for p in ranks) == ["ddp-rank-0", "ddp-rank-1"]
        t0 = time.monotonic()
        km.interrupt_kernel()
        outputs = _wait_idle(kc, msg_id, timeout=30)
        elapsed = time.monotonic() - t0
        assert elapsed < SOON, f"interrupt took {elapsed:.1f} s"
        errors = [o for o in outputs if "ename" in o]
        assert errors and errors[0]["ename"] == "KeyboardInterrupt"
        # Above it, where each rank was when stop was pressed: the notebook's own line.
        text = "".join(o.get("text", "") for o in outputs if o.get("name") == "stderr")
        assert "Interrupted: every rank was stopped. Where each was" in text, outputs
        for rank in (0, 1):
            assert f"rank {rank}:\n  Cell In[" in text and "time.sleep(600)" in text
        names = [p.name() for p in descendants(km.provisioner.process.pid)]
        # The zygote remains; no rank does.
        assert "ddp-zygote" in names and not [n for n in names if "rank" in n], names
        msg_id = kc.execute("print(list(launch(lambda: 5, nprocs=2)))")
        outputs = _wait_idle(kc, msg_id, timeout=60)
        assert any("[5, 5]" in o.get("text", "") for o in outputs)

        kc.execute(FOREVER)  # and now the kernel itself dies in the middle of a launch
        _until_started(kc)
        family = _until_ranks(km.provisioner.process.pid)
        assert len(family) >= 3
        km.provisioner.process.kill()  # SIGKILL: the kernel gets no chance to clean up
        gone, alive = __import__("psutil").wait_procs(family, timeout=5)
        assert not alive, f"still running after the kernel died: {alive}"
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def test_magic_spreads_ranks_over_simulated_nodes(magic_run):
    assert stream_text(magic_run[9]) == (
        "[rank 0] 0 0 2\n[rank 1] 0 1 2\n[rank 2] 1 0 2\n[rank 3] 1 1 2\n"
    )
    assert "UsageError: nprocs=3 ranks cannot be spread evenly over nnodes=2" in stream_text(
        magic_run[10], "stderr"
    )


HANGING_CELL = (
    "%%ddp -n 2\nimport os, time\nprint('port', os.environ['MASTER_PORT'], flush=True)\n"
    "time.sleep(600)"
)


def _sigint_every_descendant(kernel: int) -> None:
    """VS Code's interrupt (vscode-jupyter since 2024.12, raw kernels): SIGINT to each process
    in the kernel's tree (pidtree), deepest first as listed, then to the kernel itself."""
    import os
    import signal

    import psutil

    for proc in psutil.Process(kernel).children(recursive=True):
        try:
            os.kill(proc.pid, signal.SIGINT)
        except ProcessLookupError:
            pass
    os.kill(kernel, signal.SIGINT)


def _sigint_kernel_group(kernel: int) -> None:
    """An interrupt through jupyter_client (Jupyter servers, VS Code's remote kernels): SIGINT
    to the kernel's process group, which the kernel leads."""
    import os
    import signal

    assert os.getpgid(kernel) == kernel, "the kernel must lead its own process group"
    os.killpg(kernel, signal.SIGINT)


def _listening(port: int) -> bool:
    import psutil

    return any(
        c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN
        for c in psutil.net_connections("tcp")
    )


@pytest.mark.parametrize("interrupt", [_sigint_every_descendant, _sigint_kernel_group])
def test_sigint_to_the_kernel_and_its_children_stops_a_ddp_cell_with_every_ranks_stack(interrupt):
    """VS Code's stop button: the ranks and the zygote get SIGINT too, yet the cell stops
    within 3 s with where each rank was, the next cell runs, and nothing is left behind."""
    import psutil

    km = KernelManager(kernel_name="python3")
    km.start_kernel()
    kc = km.client()
    kc.start_channels()
    kernel = km.provisioner.process.pid
    family: list[psutil.Process] = []
    try:
        kc.wait_for_ready(timeout=60)
        _wait_idle(kc, kc.execute("%load_ext ddp_helpers"), timeout=60)
        msg_id = kc.execute(HANGING_CELL)
        ports = set()
        while len(ports) < 2:  # both ranks have printed: they are in time.sleep
            msg = kc.get_iopub_msg(timeout=60)
            if msg["msg_type"] == "stream":
                ports.update(re.findall(r"\[rank (\d)\] port (\d+)", msg["content"]["text"]))
        (port,) = {int(p) for _, p in ports}
        family = _until_ranks(kernel)
        ranks = [p for p in family if p.name().startswith("ddp-rank")]
        assert sorted(p.name() for p in ranks) == ["ddp-rank-0", "ddp-rank-1"], family
        assert "ddp-zygote" in [p.name() for p in family]

        t0 = time.monotonic()
        interrupt(kernel)
        outputs = _wait_idle(kc, msg_id, timeout=30)
        elapsed = time.monotonic() - t0
        assert elapsed < SOON, f"the cell took {elapsed:.1f} s to stop"
        errors = [o for o in outputs if "ename" in o]
        assert [e["ename"] for e in errors] == ["KeyboardInterrupt"], outputs
        text = "".join(o.get("text", "") for o in outputs if o.get("name") == "stderr")
        assert "Interrupted: every rank was stopped. Where each was" in text, outputs
        for rank in (0, 1):
            block = text.split(f"rank {rank}:\n", 1)[-1]
            assert re.match(r"  Cell In\[2\], line 4, in <module>\n    time.sleep\(600\)", block), (
                text
            )
        _, alive = psutil.wait_procs(ranks, timeout=2)
        assert not alive, f"ranks still running after the interrupt: {alive}"
        assert not _listening(port), f"the rendezvous port {port} is still open"
        names = [p.name() for p in descendants(kernel)]
        assert "ddp-zygote" in names, f"the launcher's helper did not survive SIGINT: {names}"

        outputs = _wait_idle(kc, kc.execute("%%ddp -n 2\nprint('next')"), timeout=60)
        lines = "".join(o.get("text", "") for o in outputs).splitlines()
        assert sorted(lines) == ["[rank 0] next", "[rank 1] next"], outputs
        assert not [o for o in outputs if "ename" in o], outputs
        family += descendants(kernel)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    _, alive = psutil.wait_procs(family, timeout=5)
    assert not alive, f"still running after the kernel was shut down: {alive}"
