"""Claims lesson 05 makes about torch.compile with DDP and with FSDP2 on torch 2.13, on the
lesson's model (lesson05/common.py: embed, 3 blocks, head; 994 parameters) and on it made
256 wide and 8 blocks deep (529,154 parameters, about 2 MiB in float32).

One job of 2 plain ranks (claims_support.plain_job, as torchrun starts them), gloo on the
CPU, run once for the module: each rank trains eagerly and compiled, counting the graphs
Dynamo hands a backend of its own that wraps "aot_eager" (as the lesson's cell does), and
writes what it found, fact by fact, to OUT.RANK (JSON); rank 0 then compiles a small
function with inductor, without a C++ compiler and with one. Each test reads one fact.
docs/claims.md names each claim's cell and its test here. Its cost: about 20 s of wall
time on 2 busy cores, most of it inductor's C++ build of one small kernel.
"""

from __future__ import annotations

import json
import shutil

import pytest
from claims_support import RANK_RECORDS, plain_job

from ddp_helpers.paths import ROOT

JOB = (
    r"""
import json
import os
import sys

OUT, ROOT, CACHE = sys.argv[1], sys.argv[2], sys.argv[3]
os.environ["TORCHINDUCTOR_CACHE_DIR"] = CACHE  # a fresh cache: inductor builds, never reuses
sys.path.insert(0, ROOT)
"""
    + RANK_RECORDS
    + r"""

import torch
import torch.distributed as dist
from torch._dynamo.backends.registry import lookup_backend
from torch._dynamo.utils import counters
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP

from ddp_helpers.exercises.lesson05.common import make_batches, make_model, my_rows

dist.init_process_group("gloo")
mesh = init_device_mesh("cpu", (W,))
graphs = []  # per graph: its linear layers, and how many times it ran


def counting(gm, example_inputs):
    linears = sum(n.op == "call_function" and "linear" in str(n.target) for n in gm.graph.nodes)
    graph = {"linears": linears, "runs": 0}
    graphs.append(graph)
    compiled = lookup_backend("aot_eager")(gm, example_inputs)

    def run(*args):
        graph["runs"] += 1
        return compiled(*args)

    return run


def fsdp(model):
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    return fully_shard(model, mesh=mesh)


def losses(model, steps=3):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x, y = make_batches(steps, 12)
    out = []
    for s in range(steps):
        loss = torch.nn.functional.mse_loss(model(my_rows(x[s], rank, W)), my_rows(y[s], rank, W))
        opt.zero_grad()
        loss.backward()
        opt.step()
        out.append(loss.item())
    return out


def compiled_against_eager(name, wrap, size):
    # the cell's order: the model compiled in place, then wrapped
    eager = losses(wrap(make_model(**size)))
    model = make_model(**size)
    model.compile(backend=counting)
    graphs.clear()
    counters.clear()
    compiled = losses(wrap(model))
    keep(name, {
        "eager": eager, "compiled": compiled, "graphs": [dict(g) for g in graphs],
        # why Dynamo gave up a frame, each reason's first words, and whether it was in a loop
        "unsupported": sorted({why.splitlines()[0] for why in counters["unimplemented"]}),
        "skipped_disable": any("qualname: disable" in why for why in counters["unimplemented"]),
        "in_a_loop": any("graph break in loop" in why for why in counters["unimplemented"]),
        "parameters": sum(p.numel() for p in model.parameters()),
    })


compiled_against_eager("ddp", DDP, {})
compiled_against_eager("ddp_wide", DDP, {"width": 256, "depth": 8})
compiled_against_eager("fsdp", fsdp, {})

# bucket_cap_mb below 1 MiB under torch.compile (DDP alone takes it)
x, y = make_batches(1, 12)
small = make_model()
small.compile(backend=counting)
keep("small_buckets", {
    "eager": said(lambda: DDP(make_model(), bucket_cap_mb=0.5)(my_rows(x[0], rank, W))),
    "compiled": said(lambda: DDP(small, bucket_cap_mb=0.5)(my_rows(x[0], rank, W))),
})

if rank == 0:
    import torch._inductor.config as inductor_config
    from torch._inductor.utils import run_and_get_code
    from torch.utils._triton import has_triton

    def f(t):
        return torch.tanh(t) * 2 + 1

    t = torch.randn(8)
    saved = inductor_config.cpp.cxx
    inductor_config.cpp.cxx = (None, os.path.join(CACHE, "no-such-compiler"))
    without = said(lambda: torch.compile(f, backend="inductor")(t))
    inductor_config.cpp.cxx = saved
    torch._dynamo.reset()
    result, code = run_and_get_code(torch.compile(f, backend="inductor"), t)
    keep("inductor", {
        "without_compiler": without,
        "with_compiler": torch.equal(result, f(t)),
        "writes_cpp": any('extern "C"' in c for c in code),
        "triton": has_triton(),
    })
dist.barrier()
dist.destroy_process_group()
sys.stdout.flush()
os._exit(0)  # the gloo exit quirk (COURSE.md): a clean group, then no exit-time abort
"""
)


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """JOB on 2 plain ranks: {"outcome": ..., "ranks": [what each found]}."""
    folder = tmp_path_factory.mktemp("compile")
    script, out, cache = folder / "compile_job.py", folder / "out", folder / "inductor"
    script.write_text(JOB)
    outcome = plain_job(script, nprocs=2, limit=120, args=(str(out), str(ROOT), str(cache)))
    ranks = []
    for rank in range(2):
        written = out.with_name(f"out.{rank}")
        ranks.append(json.loads(written.read_text()) if written.exists() else {})
    return {"outcome": outcome, "ranks": ranks}


def _fact(job: dict, name: str) -> list:
    """Each rank's finding `name`; a missing one fails with the job's outcome."""
    found = [rank.get(name) for rank in job["ranks"]]
    assert all(f is not None for f in found), f"{name}: not found; the job: {job['outcome']}"
    return found


def test_ddp_compiled_with_aot_eager_is_one_graph_and_trains_as_eager_bit_for_bit(job):
    # lesson 05: the lesson's model (994 parameters, 3,976 bytes) fits DDP's first bucket:
    # Dynamo hands the backend one graph, the whole forward (5 linear layers), run once a
    # step; 3 AdamW steps give eager's losses exactly on each rank. And the job ends clean:
    # no rank failed, none wrote on stderr (a warning of Dynamo's would show there, and in
    # the lesson's cell).
    assert job["outcome"] == "clean"
    for found in _fact(job, "ddp"):
        assert found["parameters"] == 994
        assert found["graphs"] == [{"linears": 5, "runs": 3}]
        assert found["unsupported"] == []
        assert found["compiled"] == found["eager"]


def test_ddp_compiled_splits_the_graph_where_the_parameters_counted_backwards_reach_1_mib(job):
    # lesson 05: made 256 wide and 8 blocks deep (529,154 parameters, 2,116,616 bytes),
    # the forward is split in two graphs (DDPOptimizer: parameters counted from the end,
    # a new bucket, and a graph break, once they reach the first bucket's 1 MiB; the next
    # holds up to 25 MiB): the later graph holds the head and the last blocks, just past
    # 1 MiB; the earlier one the embedding and the other blocks. Nothing falls back to
    # eager; the losses are eager's exactly.
    block, head = (256 * 256 + 256) * 4, (256 * 2 + 2) * 4
    for found in _fact(job, "ddp_wide"):
        assert found["parameters"] == 529_154
        first, second = found["graphs"]
        assert first["linears"] + second["linears"] == 10  # embed, 8 blocks, head
        later_blocks = second["linears"] - 1
        assert head + later_blocks * block >= 2**20 > head + (later_blocks - 1) * block
        assert found["unsupported"] == []
        assert found["compiled"] == found["eager"]


def test_fsdp2_compiled_breaks_at_its_hooks_each_block_one_graph_the_root_eager(job):
    # lesson 05: compiled whole and sharded per block, FSDP2's model gives the backend one
    # graph, a block's forward (one linear layer), run by each of the 3 blocks at every
    # step (9 runs in 3 steps): FSDP2's hooks are not traced (torch._dynamo.disable, "skipping
    # FSDP hooks"): Dynamo meets one inside the root's loop over the blocks, gives up the
    # root's frame (a graph break in a loop), and the root's own forward (embed, head) runs
    # eagerly. The losses are eager FSDP2's exactly.
    for found in _fact(job, "fsdp"):
        assert found["parameters"] == 994
        assert found["graphs"] == [{"linears": 1, "runs": 9}]
        assert found["unsupported"] == ["Attempted to call function marked as skipped"]
        assert found["skipped_disable"] and found["in_a_loop"]
        assert found["compiled"] == found["eager"]


def test_ddp_under_compile_refuses_a_bucket_cap_below_the_first_buckets_1_mib(job):
    # lesson 05: DDP alone takes bucket_cap_mb=0.5; compiled, Dynamo keeps a first bucket of
    # 1 MiB and fails on a cap below it, at the first forward.
    for found in _fact(job, "small_buckets"):
        assert found["eager"] == "ran"
        assert found["compiled"].startswith("AssertionError: First bucket should be smaller/equal")


def test_inductor_on_the_cpu_writes_cpp_and_needs_a_cpp_compiler(job):
    # lesson 05: inductor, torch.compile's default backend, on CPU tensors writes C++
    # (extern "C" kernels) and builds it with the compiler of torch._inductor.config.cpp.cxx
    # (g++, or $CXX); with none that works it raises InvalidCxxCompiler. The CPU wheel has no
    # Triton.
    found = job["ranks"][0].get("inductor")
    assert found is not None, f"inductor: not found; the job: {job['outcome']}"
    assert "InvalidCxxCompiler" in found["without_compiler"]
    assert "No working C++ compiler found" in found["without_compiler"]
    assert found["triton"] is False
    if not shutil.which("g++"):
        pytest.skip("no g++ on this machine: inductor's working build is not shown")
    assert found["with_compiler"] is True and found["writes_cpp"] is True
