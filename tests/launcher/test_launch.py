"""The launcher called from Python: results, environment, output, failures, timeouts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest

from ddp_helpers import DistributedError, Results, launch, spawn
from ddp_helpers.launcher import client
from ddp_helpers.procs import with_this_package
from support import SOON


def env_of_rank():
    keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS")
    return {k: os.environ.get(k) for k in keys}


def all_reduce_rank_plus_one():
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t)
    dist.destroy_process_group()
    return t


@pytest.mark.parametrize("n", [2, 3])
def test_every_rank_returns_its_value_in_rank_order(n):
    results = launch(lambda x: (int(os.environ["RANK"]), x * 2), 21, nprocs=n)
    assert isinstance(results, Results)
    assert list(results) == [(r, 42) for r in range(n)]
    assert results.rank0 == (0, 42)


def test_each_rank_gets_the_torchrun_environment():
    envs = launch(env_of_rank, nprocs=3)
    ports = {e["MASTER_PORT"] for e in envs}
    assert len(ports) == 1 and int(ports.pop()) > 0
    for rank, env in enumerate(envs):
        assert env["RANK"] == env["LOCAL_RANK"] == str(rank)
        assert env["WORLD_SIZE"] == "3"
        assert env["MASTER_ADDR"] == "127.0.0.1"
        assert env["OMP_NUM_THREADS"] == "1"


def torchrun_env():
    keys = ("RANK", "LOCAL_RANK", "GROUP_RANK", "LOCAL_WORLD_SIZE", "WORLD_SIZE")
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")  # the four ranks of two "machines" form one group
    total = torch.ones(1)
    dist.all_reduce(total)
    dist.destroy_process_group()
    return {k: int(os.environ[k]) for k in keys}, os.environ.get("CUDA_VISIBLE_DEVICES"), total


def test_two_simulated_nodes_give_each_rank_torchruns_multi_node_environment():
    results = launch(torchrun_env, nprocs=4, nnodes=2)
    table = [(e["RANK"], e["GROUP_RANK"], e["LOCAL_RANK"]) for e, _, _ in results]
    assert table == [(0, 0, 0), (1, 0, 1), (2, 1, 0), (3, 1, 1)]
    for env, _, total in results:
        assert (env["LOCAL_WORLD_SIZE"], env["WORLD_SIZE"]) == (2, 4)
        assert total.item() == 4.0


def test_spawn_passes_the_global_rank_on_several_nodes_too(tmp_path):
    def record(rank, folder):
        # As PyTorch's tutorials do: init_process_group(rank=rank, world_size=...).
        import torch.distributed as dist

        dist.init_process_group("gloo", rank=rank, world_size=4)
        dist.barrier()
        dist.destroy_process_group()
        node, local = os.environ["GROUP_RANK"], os.environ["LOCAL_RANK"]
        (folder / str(rank)).write_text(f"{node} {local}")

    assert spawn(record, args=(tmp_path,), nprocs=4, nnodes=2) is None
    seen = [(tmp_path / str(r)).read_text() for r in range(4)]
    assert seen == ["0 0", "0 1", "1 0", "1 1"]
    with pytest.raises(ValueError, match="nprocs=6 ranks cannot be spread evenly over nnodes=4"):
        spawn(record, args=(tmp_path,), nprocs=6, nnodes=4)


@pytest.mark.parametrize(
    ("gpus", "visible"), [(2, ["", "", "", ""]), (4, ["0,1", "0,1", "2,3", "2,3"])]
)
def test_simulated_nodes_with_a_faked_gpu_count(monkeypatch, capfd, gpus, visible):
    monkeypatch.setattr(client.get(), "gpus", gpus)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    # gloo: these ranks have no real GPU to pin; only what each "machine" would see is checked.
    results = launch(torchrun_env, nprocs=4, nnodes=2, backend="gloo")
    assert [seen for _, seen, _ in results] == visible
    notice = capfd.readouterr().err
    if gpus == 2:
        assert "would need 4 GPUs, one per rank, but this machine has 2" in notice
    else:
        assert "would need" not in notice


def test_default_thread_count_shares_the_cores(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS")
    cores = len(os.sched_getaffinity(0))
    threads = launch(lambda: __import__("torch").get_num_threads(), nprocs=2)
    assert list(threads) == [max(1, cores // 2)] * 2


def test_lessons_own_init_process_group_works_unchanged_and_tensors_come_back_on_cpu():
    results = launch(all_reduce_rank_plus_one, nprocs=3)
    assert [t.tolist() for t in results] == [[6.0]] * 3
    assert all(t.device.type == "cpu" and not t.requires_grad for t in results)


def test_parameters_with_grad_come_back_detached():
    def make():
        import torch

        return {"w": torch.nn.Parameter(torch.ones(2)), "n": 3}

    r = launch(make, nprocs=2)
    assert r[1]["n"] == 3 and r[1]["w"].tolist() == [1.0, 1.0]
    assert not r[1]["w"].requires_grad


def test_lines_are_prefixed_and_routed_to_the_matching_stream(capsys):
    def talk():
        import sys

        rank = os.environ["RANK"]
        print(f"hello from {rank}")
        print(f"warning from {rank}", file=sys.stderr)

    launch(talk, nprocs=2)
    out, err = capsys.readouterr()
    assert sorted(out.splitlines()) == ["[rank 0] hello from 0", "[rank 1] hello from 1"]
    assert sorted(err.splitlines()) == ["[rank 0] warning from 0", "[rank 1] warning from 1"]


def test_a_burst_of_lines_from_three_ranks_never_breaks_a_line(capsys):
    def burst():
        import sys

        rank = os.environ["RANK"]
        for i in range(400):
            # Written in pieces, as a library might, with no flush between.
            sys.stdout.write(f"rank={rank} line={i:03d} ")
            sys.stdout.write("x" * (i % 97) + "\n")

    launch(burst, nprocs=3)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1200
    for line in lines:
        prefix, rest = line.split("] ", 1)
        rank = prefix.removeprefix("[rank ")
        assert rest.startswith(f"rank={rank} line=")
        i = int(rest.split("line=")[1][:3])
        assert rest == f"rank={rank} line={i:03d} " + "x" * (i % 97)


def test_carriage_return_progress_does_not_flood(capsys):
    def progress():
        import sys

        for i in range(1, 2001):
            sys.stdout.write(f"\rstep {i}/2000")
        sys.stdout.write("\n")
        print("done")

    launch(progress, nprocs=2)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) <= 2 * 6, lines
    for rank in (0, 1):
        mine = [line for line in lines if line.startswith(f"[rank {rank}] ")]
        assert mine[-2:] == [f"[rank {rank}] step 2000/2000", f"[rank {rank}] done"]


def test_ordered_output_prints_rank_by_rank(capsys):
    def talk():
        import time

        rank = int(os.environ["RANK"])
        for i in range(3):
            time.sleep(0.05 if rank == 0 else 0.01)
            print(f"{rank}.{i}")

    launch(talk, nprocs=3, ordered=True)
    assert capsys.readouterr().out.splitlines() == [
        f"[rank {r}] {r}.{i}" for r in range(3) for i in range(3)
    ]


def raise_on_rank_one():
    import time

    if os.environ["RANK"] == "1":
        raise ValueError("the batch had 3 items, expected 4")
    time.sleep(60)


def test_a_raising_rank_fails_fast_with_its_traceback():
    t0 = time.monotonic()
    with pytest.raises(DistributedError) as info:
        launch(raise_on_rank_one, nprocs=3)
    elapsed = time.monotonic() - t0
    err = info.value
    assert elapsed < SOON, f"took {elapsed:.1f} s"
    assert err.kind == "exception" and err.rank == 1 and err.exc_type == "ValueError"
    assert err.exc_message == "the batch had 3 items, expected 4"
    text = err.render()
    assert "rank 1 raised ValueError: the batch had 3 items, expected 4" in text
    assert "in raise_on_rank_one" in text
    assert 'raise ValueError("the batch had 3 items, expected 4")' in text
    assert "ddp_helpers/worker.py" not in text  # the launcher's frames are hidden
    assert isinstance(err.original, ValueError)


def test_a_failing_collective_names_the_first_rank_not_its_victims():
    def fail_then_collect():
        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo")
        if dist.get_rank() == 0:
            raise KeyError("missing key")
        dist.all_reduce(torch.ones(1))

    with pytest.raises(DistributedError) as info:
        launch(fail_then_collect, nprocs=2, timeout=30)
    assert info.value.rank == 0 and info.value.exc_type == "KeyError"


def test_a_rank_that_exits_is_reported_with_its_exit_code():
    def exit_three():
        import time

        if os.environ["RANK"] == "0":
            os._exit(3)
        time.sleep(60)

    with pytest.raises(DistributedError) as info:
        launch(exit_three, nprocs=2)
    assert info.value.kind == "exit" and info.value.rank == 0 and info.value.exitcode == 3
    assert "rank 0 exited with code 3" in info.value.render()


def test_sys_exit_zero_counts_as_returning_none_and_nonzero_as_failure():
    assert list(launch(lambda: __import__("sys").exit(0), nprocs=2)) == [None, None]
    with pytest.raises(DistributedError, match=r"rank \d called sys.exit\(2\)"):
        launch(lambda: __import__("sys").exit(2), nprocs=2)


def test_a_killed_rank_is_reported_with_the_signal_name():
    def die():
        import time

        if os.environ["RANK"] == "1":
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)

    t0 = time.monotonic()
    with pytest.raises(DistributedError) as info:
        launch(die, nprocs=2)
    assert time.monotonic() - t0 < SOON
    assert info.value.kind == "signal" and info.value.signal_name == "SIGKILL"
    assert "rank 1 was killed by SIGKILL (signal 9)" in info.value.render()


def test_a_segfault_shows_the_python_stack_of_the_crash():
    def crash():
        import ctypes

        if os.environ["RANK"] == "1":
            ctypes.string_at(0)

    with pytest.raises(DistributedError) as info:
        launch(crash, nprocs=2)
    text = info.value.render()
    assert info.value.signal_name == "SIGSEGV"
    assert "ctypes.string_at(0)" in text and "in crash" in text


def sleepy():
    import time

    time.sleep(100)


def test_timeout_stops_every_rank_and_shows_where_each_was():
    t0 = time.monotonic()
    with pytest.raises(DistributedError) as info:
        launch(sleepy, nprocs=2, timeout=1.5)
    elapsed = time.monotonic() - t0
    assert 1.5 <= elapsed < 1.5 + SOON
    err = info.value
    assert err.kind == "timeout" and sorted(err.stacks) == [0, 1]
    for stack in err.stacks.values():
        assert "in sleepy" in stack and "time.sleep(100)" in stack
    assert "did not finish within 1.5 s" in err.render()


def test_timeout_gives_the_stack_of_a_rank_stuck_in_cpp_collective():
    def barrier_on_rank_zero_only():
        import datetime

        import torch.distributed as dist

        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
        if dist.get_rank() == 0:
            dist.barrier()  # rank 1 never arrives
        else:
            time.sleep(60)  # busy with something else

    with pytest.raises(DistributedError) as info:
        launch(barrier_on_rank_zero_only, nprocs=2, timeout=1.5)
    err = info.value
    assert "dist.barrier()  # rank 1 never arrives" in err.stacks[0]
    assert "in barrier" in err.stacks[0]
    assert "time.sleep(60)  # busy with something else" in err.stacks[1]
    assert "inside `if rank == 0:`" in err.render()


def test_a_collective_whose_peer_already_returned_gets_a_hint():
    def barrier_on_rank_zero_only():
        import torch.distributed as dist

        dist.init_process_group("gloo")
        if dist.get_rank() == 0:
            dist.barrier()

    with pytest.raises(DistributedError) as info:
        launch(barrier_on_rank_zero_only, nprocs=2, timeout=30)
    text = info.value.render()
    assert info.value.rank == 0
    assert "rank 1 had already returned" in text and "inside `if rank == 0:`" in text
    assert str(info.value).startswith("rank 1 returned while rank 0 waited in `barrier`")


def test_a_rank_the_launcher_stopped_is_not_blamed():
    # Rank 2 returns, rank 0 waits for it in a broadcast, rank 1 is busy and is stopped
    # by the launcher after rank 0 fails: rank 0's error is the one to show.
    def broadcast_from_a_rank_that_left():
        import time

        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo")
        rank = dist.get_rank()
        if rank == 0:
            dist.broadcast(torch.zeros(1), src=2)
        elif rank == 1:
            time.sleep(60)

    with pytest.raises(DistributedError) as info:
        launch(broadcast_from_a_rank_that_left, nprocs=3, timeout=30)
    text = info.value.render()
    assert info.value.rank == 0, text
    assert "rank 2 had already returned" in text and "inside `if rank == 0:`" in text
    assert "rank 1 was" not in text  # stopped by the launcher: not a failure of its own


def test_next_launch_after_a_failure_works():
    with pytest.raises(DistributedError):
        launch(raise_on_rank_one, nprocs=2)
    assert list(launch(lambda: 7, nprocs=2)) == [7, 7]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"nprocs": 0}, "nprocs must be a whole number of ranks, 1 or more; got 0"),
        ({"nprocs": 2.0}, "nprocs must be a whole number"),
        ({"nprocs": 3, "nnodes": 2}, "nprocs=3 ranks cannot be spread evenly over nnodes=2"),
        ({"backend": "mpi"}, "backend must be 'auto', 'gloo' or 'nccl'; got 'mpi'"),
        ({"timeout": 0}, "timeout must be a number of seconds above 0"),
    ],
)
def test_bad_options_get_a_clear_error_before_anything_starts(kwargs, message):
    client.shutdown()  # so that a launcher's helper started by this launch would show
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        launch(print, **kwargs)
    assert {p.pid for p in psutil.Process().children(recursive=True)} == before
    assert client.running() is None


def test_nccl_without_gpus_says_how_many_were_found_and_what_works():
    gpus = client.get().gpus
    if gpus >= 2:
        pytest.skip("this machine has GPUs; the nccl path is checked by benchmarks/gpu_check.sh")
    with pytest.raises(ValueError, match=rf"{gpus} GPU\(s\) were found.*backend='gloo'"):
        launch(print, nprocs=2, backend="nccl")


def test_an_unpicklable_argument_is_named():
    import threading

    with pytest.raises(TypeError, match=r"Argument 2 \(lock\) cannot be sent"):
        launch(print, 1, threading.Lock(), nprocs=2)
    from ja_guard import english_in_japanese

    from ddp_helpers import i18n

    with i18n.using("ja"), pytest.raises(TypeError) as raised:  # what it names is Japanese too
        launch(print, 1, key=threading.Lock(), nprocs=2)
    said = str(raised.value)
    assert said.startswith("キーワード引数 'key'（lock 型）をランクのプロセスに送れません")
    assert english_in_japanese(said.split("「")[0]) == []


def test_how_a_process_ended_is_said_in_the_current_language():
    from ddp_helpers import i18n
    from ddp_helpers.procs import describe_exit

    assert (describe_exit(-9), describe_exit(3)) == ("killed by SIGKILL", "exit code 3")
    with i18n.using("ja"):
        assert (describe_exit(-9), describe_exit(3)) == ("SIGKILL で強制終了", "終了コード 3")


def test_a_return_value_that_cannot_come_back_is_said_in_the_notebooks_language():
    """The rank words it (rank.py): the ranks speak the language chosen in the kernel, for
    one block (i18n.using) too, not only through the environment (issue 40)."""
    from ja_guard import english_in_japanese

    from ddp_helpers import i18n

    def lock():
        return threading.Lock()

    with pytest.raises(DistributedError) as raised:
        launch(lock, nprocs=2)
    assert "the return value (lock) could not be sent back" in str(raised.value)
    with i18n.using("ja"), pytest.raises(DistributedError) as raised:
        launch(lock, nprocs=2)
    said = str(raised.value)
    assert "戻り値（lock 型）をノートブックに送り返せませんでした" in said
    assert english_in_japanese(said.split("「")[0]) == []


@pytest.mark.parametrize(("gpus", "backend"), [(0, "gloo"), (2, "nccl")])
def test_auto_backend_is_gloo_without_gpus(monkeypatch, gpus, backend):
    if gpus and client.get().gpus:
        pytest.skip("faked GPUs on a machine with real ones: a rank would pin a missing one")
    monkeypatch.setattr(client.get(), "gpus", gpus)
    # The ranks only read which backend they were given: none initialises it.
    assert list(launch(lambda: os.environ["DDP_HELPERS_BACKEND"], nprocs=2)) == [backend] * 2


def tutorial_demo(rank, world_size, seen):
    # As in PyTorch's DDP tutorial: the function sets the rendezvous itself.
    import torch
    import torch.distributed as dist

    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "12355"
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    t = torch.tensor([rank])
    dist.all_reduce(t)
    print(f"rank {rank}: sum {t.item()} {seen}")
    dist.destroy_process_group()


def test_spawn_runs_tutorial_code_unchanged(capsys):
    assert spawn(tutorial_demo, args=(2, "ok"), nprocs=2, join=True) is None
    out = capsys.readouterr().out
    assert "[rank 0] rank 0: sum 1 ok" in out and "[rank 1] rank 1: sum 1 ok" in out


def nap_then_demo(rank, world_size, seen):
    time.sleep(1.0)
    tutorial_demo(rank, world_size, seen)


def test_spawn_without_join_returns_at_once_and_join_waits_for_the_ranks(capsys):
    ctx = spawn(nap_then_demo, args=(2, "later"), nprocs=2, join=False)
    assert ctx.join(timeout=0.05) is False  # the ranks are still napping
    assert "rank 0: sum 1 later" not in capsys.readouterr().out
    assert ctx.join() is True
    out = capsys.readouterr().out
    assert "[rank 0] rank 0: sum 1 later" in out and "[rank 1] rank 1: sum 1 later" in out


def use_a_child_process(rank):
    import multiprocessing

    child = multiprocessing.get_context("fork").Process(target=int)
    child.start()
    child.join()


def test_spawn_daemon_ranks_may_not_have_children_as_with_torch():
    assert spawn(use_a_child_process, nprocs=2, daemon=False) is None
    with pytest.raises(DistributedError, match="daemonic processes are not allowed to have"):
        spawn(use_a_child_process, nprocs=2, daemon=True)


@pytest.mark.parametrize("method", ["spawn", "fork", "forkserver"])
def test_spawn_takes_every_start_method_of_multiprocessing(tmp_path, method):
    def mark(rank, folder):
        (folder / str(rank)).write_text(os.environ["RANK"])

    assert spawn(mark, args=(tmp_path,), nprocs=2, start_method=method) is None
    assert sorted(p.read_text() for p in tmp_path.iterdir()) == ["0", "1"]


def test_spawn_refuses_an_unknown_start_method_before_anything_starts():
    with pytest.raises(ValueError, match=r"start_method must be 'spawn', 'fork' or 'forkserver'"):
        spawn(print, nprocs=2, start_method="thread")


def test_spawn_reports_a_failure_like_launch():
    def bad(rank):
        raise RuntimeError(f"rank {rank} is unhappy")

    with pytest.raises(DistributedError, match="raised RuntimeError: rank . is unhappy"):
        spawn(bad, nprocs=2)


def test_the_error_is_one_paragraph_carries_every_ranks_failure_and_pickles():
    import pickle

    def two_fail():
        rank = int(os.environ["RANK"])
        if rank == 0:
            raise KeyError("first")
        __import__("time").sleep(0.05 if rank == 2 else 30)
        if rank == 2:
            raise ValueError("second, within the grace before the others are stopped")

    with pytest.raises(DistributedError) as info:
        launch(two_fail, nprocs=3)
    err = info.value
    assert "\n" not in str(err) and str(err).startswith("rank 0 raised KeyError: 'first'.")
    assert err.failures[0].kind == "exception" and err.failures[0].exc_type == "KeyError"
    assert err.failures[2].exc_type == "ValueError" and err.failures[1].stopped
    assert "in two_fail" in err.failures[0].traceback
    lines = err._render_traceback_()  # what IPython shows instead of the launcher's frames
    assert lines[0] == f"DistributedError: {err}" and "Traceback of rank 0" in "\n".join(lines)
    again = pickle.loads(pickle.dumps(err))
    assert (again.kind, again.rank, str(again), again.render()) == (
        err.kind,
        err.rank,
        str(err),
        err.render(),
    )
    assert again.failures == err.failures and isinstance(again.original, KeyError)


def nap(rank, seconds):
    __import__("time").sleep(seconds)


def test_a_spawn_that_is_never_joined_does_not_block_later_launches(capfd):
    import gc

    context = spawn(nap, args=(30,), nprocs=2, join=False)
    try:
        with pytest.raises(RuntimeError, match=r"still running .* \.join\(\) .* \.terminate"):
            launch(print, nprocs=1)
    except BaseException:
        context.terminate()
        raise
    del context  # dropped: nothing can join it any more
    gc.collect()
    assert list(launch(lambda: 1, nprocs=2)) == [1, 1]
    assert "was never joined and nothing can join it any more" in capfd.readouterr().err

    kept = spawn(nap, args=(0,), nprocs=2, join=False)
    # Until it has finished (its run's own events read, as a later launch reads them), unjoined.
    assert kept._run.poll(time.monotonic() + SOON), "the spawn did not finish"
    assert list(launch(lambda: 2, nprocs=2)) == [2, 2]
    assert "finished without being joined: it succeeded" in capfd.readouterr().err

    running = spawn(nap, args=(30,), nprocs=2, join=False)
    running.terminate()
    assert list(launch(lambda: 3, nprocs=2)) == [3, 3]
    assert kept is not None


@pytest.mark.parametrize("setting, starts", [(None, True), ("0", False)])
def test_load_ext_starts_the_launcher_ahead_unless_told_not_to(setting, starts):
    code = (
        "import threading, psutil\n"
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "import ddp_helpers\n"
        "ddp_helpers.load_ipython_extension(InteractiveShell.instance())\n"
        "for thread in threading.enumerate():\n"
        "    if thread.name == 'ddp-warm-up':\n"
        "        thread.join(60)\n"
        "print(any(p.name() == 'ddp-zygote' for p in psutil.Process().children()))\n"
    )
    env = with_this_package(dict(os.environ))
    env.pop("DDP_HELPERS_WARM_UP", None)
    if setting is not None:
        env["DDP_HELPERS_WARM_UP"] = setting
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] == str(starts)


def _nothing():
    return None


def _sleep_long():
    time.sleep(30)


def test_stop_pressed_while_the_zygote_is_still_busy_stops_at_once():
    # Ctrl-C as the kernel's stop button sends it (SIGINT to the process), raised by
    # Python's own handler (one another test left, or SIGINT ignored, would hide it).
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler, (
        f"Ctrl-C's handler here is {signal.getsignal(signal.SIGINT)!r}: left by a test before"
    )
    client.shutdown()
    launch(_nothing, nprocs=2)  # a fresh zygote's first launch: it warms up right after
    pressed: list[float] = []

    def press_stop():
        pressed.append(time.monotonic() - start)
        os.kill(os.getpid(), signal.SIGINT)

    timer = threading.Timer(0.2, press_stop)
    start = time.monotonic()
    timer.start()
    try:
        launch(_sleep_long, nprocs=2)  # requested while the zygote imports the course's modules
    except KeyboardInterrupt:
        pass
    else:
        pytest.fail(f"the launch ran to its end: stop was pressed at {pressed} s and not seen")
    assert time.monotonic() - start < SOON  # not the 30 s the ranks would sleep
    assert list(launch(_nothing, nprocs=2)) == [None, None]  # and the next launch works


def _has_dynamo():
    return "torch._dynamo" in sys.modules  # as forked: what the zygote holds


def _builds_ddp():
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    DDP(torch.nn.Linear(2, 1))
    dist.destroy_process_group()


def _until_warm(limit: float = 15) -> None:
    deadline = time.monotonic() + limit
    while list(launch(_has_dynamo, nprocs=2)) != [True, True]:
        assert time.monotonic() < deadline, f"the zygote did not warm up within {limit} s"
        time.sleep(0.1)


def test_the_zygote_imports_torch_dynamo_only_once_a_rank_has_built_ddp(monkeypatch):
    monkeypatch.setattr(client, "_ddp_expected", False)  # no lesson 02, 03 or 04 said so
    client.shutdown()
    assert list(launch(_has_dynamo, nprocs=2)) == [False, False]
    # A warm-up due goes first, before the next launch (zygote.py): this one shows none was.
    assert list(launch(_has_dynamo, nprocs=2)) == [False, False]
    launch(_builds_ddp, nprocs=2)  # each rank imports torch._dynamo itself, once
    _until_warm()


def test_expect_ddp_warms_the_running_zygote_and_every_later_zygote(monkeypatch):
    monkeypatch.setattr(client, "_ddp_expected", False)
    client.shutdown()
    assert list(launch(_has_dynamo, nprocs=2)) == [False, False]
    pid = client.running().proc.pid
    client.expect_ddp()
    # The first launch after it, at once and no retry: the zygote reads the warm-up first
    # and, a launch having come before, warms up before it forks (zygote.py's loop).
    assert list(launch(_has_dynamo, nprocs=2)) == [True, True]
    assert client.running().proc.pid == pid  # the same zygote, warmed
    client.shutdown()
    _until_warm()  # a new zygote is told at its start
    monkeypatch.setattr(client, "_ddp_expected", False)
    client.shutdown()  # the next test's zygote starts cold


def _holds(names):
    return [name for name in names if name in sys.modules]  # as forked: what the zygote holds


def test_after_its_first_launch_the_zygote_holds_the_courses_modules_and_no_rank_imports_them(
    monkeypatch,
):
    # A check's ranks run its harness, sent by reference: each would import its lesson's
    # package again (compiling it where no bytecode is written). Not torch._dynamo, though:
    # that stays for where DDP is built (the test above).
    from ddp_helpers.exercises import LESSONS
    from ddp_helpers.launcher.zygote import COURSE, WITH_DDP

    assert {f"ddp_helpers.exercises.lesson{lesson}" for lesson in LESSONS} <= set(COURSE)
    monkeypatch.setattr(client, "_ddp_expected", False)
    client.shutdown()
    course = [*COURSE, "ddp_helpers.exercises.kit"]
    assert list(launch(_holds, course, nprocs=2)) == [[], []]
    deadline = time.monotonic() + 15
    while list(launch(_holds, course, nprocs=2)) != [course, course]:
        assert time.monotonic() < deadline, "the zygote did not import the course's modules"
        time.sleep(0.1)
    # DDP's own and the checkpoint package (0.5 s without torch._dynamo) wait for DDP.
    ddp = ["torch._dynamo", *WITH_DDP]
    assert list(launch(_holds, ddp, nprocs=2)) == [[], []]
    client.expect_ddp()
    assert list(launch(_holds, ddp, nprocs=2)) == [ddp, ddp]
    monkeypatch.setattr(client, "_ddp_expected", False)
    client.shutdown()  # the next test's zygote starts cold


@pytest.mark.parametrize(
    ("lesson", "expects"),
    [("01", False), ("02", False), ("03", True), ("04", True), ("05", True)],
)
def test_a_lesson_that_builds_ddp_models_expects_ddp_where_its_notebook_starts(lesson, expects):
    """Importing a lesson's checks changes no launcher state (the grader imports them all);
    its notebook's %load_ext, after `import ... as ex`, tells the launcher (issue 40)."""
    from ddp_helpers.exercises import builds_ddp

    assert builds_ddp(lesson) is expects
    code = (
        f"import ddp_helpers.exercises.lesson{lesson}\n"
        "from ddp_helpers.launcher import client\n"
        "imported = client._ddp_expected\n"
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "import ddp_helpers\n"
        "ddp_helpers.load_ipython_extension(InteractiveShell.instance())\n"
        "print(imported, client._ddp_expected, client.running())"
    )
    env = with_this_package(dict(os.environ, DDP_HELPERS_WARM_UP="0"))
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env
    )
    # Expected from %load_ext on, not at import; and no zygote started by either.
    assert run.stdout.split() == ["False", str(expects), "None"], run.stderr


def test_wire_carries_more_descriptors_than_one_message_can():
    import socket

    from ddp_helpers.launcher import wire
    from ddp_helpers.launcher.protocol import Started

    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    pipes = [os.pipe() for _ in range(2 * wire.MAX_FDS + 3)]
    try:
        wire.send(a, Started("first"), [w for _, w in pipes])
        wire.send(a, Started("second"))
        msg, fds = wire.recv(b)
        assert msg == Started("first") and len(fds) == len(pipes)
        for i, ((r, _), fd) in enumerate(zip(pipes, fds, strict=True)):  # in order
            os.write(fd, str(i).encode())
            os.close(fd)
            assert os.read(r, 16) == str(i).encode()
        assert wire.recv(b) == (Started("second"), [])
    finally:
        a.close()
        b.close()
        for r, w in pipes:
            os.close(r)
            os.close(w)


def test_a_message_of_the_wrong_shape_is_named_with_what_was_expected():
    from ddp_helpers.launcher.protocol import Exited, ProtocolError, Started, expect

    assert expect(Started("7"), Started, Exited, sender="the zygote") == Started("7")
    cases = [
        ({"op": "started", "id": "7"}, "expected Started or Exited, got dict"),
        (Exited("7", rank="0", status=0), "malformed Exited from the zygote: rank is str, not int"),
        (Exited("7", rank=True, status=0), "rank is bool, not int"),
        (object.__new__(Started), "malformed Started from the zygote: it has no field 'id'"),
    ]
    for message, says in cases:
        with pytest.raises(ProtocolError, match=says):
            expect(message, Started, Exited, sender="the zygote")


def test_a_request_the_helper_cannot_read_is_a_clear_error_and_the_next_launch_works(
    monkeypatch,
):
    from ddp_helpers.launcher import api

    helper = client.get()
    monkeypatch.setattr(api, "cell_sources", lambda: ["not", "a", "dict"])
    with pytest.raises(DistributedError) as info:
        launch(print, nprocs=2)
    assert info.value.kind == "launcher"
    assert "did not understand each other (malformed LaunchRequest from the kernel: " in str(
        info.value
    )
    assert "sources is list, not dict" in str(info.value)
    monkeypatch.undo()
    assert list(launch(lambda: 1, nprocs=2)) == [1, 1]
    assert client.running() is not helper  # that one was stopped: a fresh one took over


def _wait_for_go(flag: str):
    open(f"{flag}.{os.environ['RANK']}", "w").close()  # this rank has started
    while not os.path.exists(f"{flag}.go"):
        time.sleep(0.01)


def _launch_in_a_thread(*args, **kwargs) -> tuple[threading.Thread, list]:
    outcome: list = []

    def run():
        try:
            outcome.append(launch(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - the test reads it
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def test_a_launch_while_another_thread_launches_is_refused_as_busy(tmp_path):
    flag = str(tmp_path / "started")
    thread, outcome = _launch_in_a_thread(_wait_for_go, flag, nprocs=2)
    try:
        deadline = time.monotonic() + SOON
        while not all(os.path.exists(f"{flag}.{rank}") for rank in (0, 1)):
            assert time.monotonic() < deadline and thread.is_alive(), outcome
            time.sleep(0.01)
        for _ in range(2):  # a refused launch must not let the running one's lock go
            with pytest.raises(RuntimeError, match="Another launch is still running"):
                launch(_nothing, nprocs=2)
    finally:
        open(f"{flag}.go", "w").close()
        thread.join(SOON)
    assert list(outcome[0]) == [None, None]
    assert list(launch(_nothing, nprocs=2)) == [None, None]  # the lock was let go


class _StoppedOnTaking:
    """The launch lock, with the kernel's stop landing just after it was taken, once."""

    def __init__(self):
        self.lock, self.fired = threading.RLock(), False

    def acquire(self, blocking=True):
        taken = self.lock.acquire(blocking)
        if taken and not self.fired:
            self.fired = True
            raise KeyboardInterrupt  # as the stop button's, between acquire() and a `try`
        return taken

    def release(self):
        self.lock.release()


def test_a_stop_landing_just_after_the_launch_lock_was_taken_does_not_keep_it(monkeypatch):
    # Kept, it would refuse every later launch as busy (one from another thread here, where
    # the lock's reentrance cannot hide it).
    from ddp_helpers.launcher import api

    monkeypatch.setattr(api, "_launch_lock", _StoppedOnTaking())
    with pytest.raises(KeyboardInterrupt):
        launch(_nothing, nprocs=2)
    thread, outcome = _launch_in_a_thread(_nothing, nprocs=2)
    thread.join(SOON)
    assert [list(r) if isinstance(r, Results) else r for r in outcome] == [[None, None]]
