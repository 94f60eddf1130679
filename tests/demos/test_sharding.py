"""Lesson 05's measuring demos (demos/sharding.py), run on real ranks as the lesson runs them:
what each rank holds under DDP, ZeRO-1 and FSDP2, the picture of it, and what one step sends.

What they establish of torch 2.13 on gloo (the lesson's claims rest on these tests):
- after one AdamW step, DDP holds on every rank 4 bytes a parameter of weights, 4 of
  gradients (those that train) and 8 of moments (plus 4 bytes of `step` a tensor); bf16
  parameters halve all three (AdamW keeps its moments in the parameters' dtype);
  ZeroRedundancyOptimizer keeps on each rank the state of whole parameters, about 1/W of it;
  FSDP2 keeps 1/W of each (a row of padding aside);
- in a step, DDP all-reduces the gradients that train (one bucket here) and broadcasts its
  buffers before the forward; FSDP2 all-gathers every block and the root before the forward,
  the blocks alone again before the backward (the root stays gathered), and reduce-scatters
  the gradients that train: less than 5.2's three passes;
- gloo has no reduce-scatter of its own: it runs each as an all-reduce of the whole tensor.
"""

from __future__ import annotations

import pytest

from ddp_helpers.demos import sharding


def _nothing():
    return None


@pytest.fixture(scope="module")
def warm_launcher():
    """The launcher's helper started and warmed for DDP, as lesson 05's notebook has it by
    the time it measures (its %load_ext expects DDP models): the demos' time is their own."""
    from ddp_helpers import launch
    from ddp_helpers.launcher import client

    client.expect_ddp()
    launch(_nothing, nprocs=1)  # waits for the warm-up, as a launch from an idle helper


@pytest.fixture(scope="module")
def measured(warm_launcher):
    return sharding.memory_per_rank(world_sizes=(2, 4))


@pytest.fixture(scope="module")
def traffic(warm_launcher):
    return sharding.bytes_sent_per_step(world_size=2)


def _tensors(width=sharding.WIDTH, depth=sharding.DEPTH) -> int:
    """How many parameter tensors train: AdamW keeps a `step` for each."""
    return 2 + 2 * depth + 1  # embed's weight and bias, each block's, the head's weight


def test_ddp_holds_16_bytes_a_parameter_on_every_rank_and_bf16_half_of_them(measured):
    all_, trainable = measured["parameters"], measured["trainable"]
    assert all_ - trainable == 2  # the head's frozen bias: no gradient, no state
    for n in (2, 4):
        ddp = measured["by_world"][n]["ddp"]
        bf16 = measured["by_world"][n]["ddp_bf16"]
        assert len(ddp) == len(bf16) == n
        for rank, half in zip(ddp, bf16, strict=True):
            assert (rank["params"], rank["grads"]) == (4 * all_, 4 * trainable)
            assert rank["state_by_name"] == {
                "exp_avg": 4 * trainable,
                "exp_avg_sq": 4 * trainable,
                "step": 4 * _tensors(),
            }
            assert (half["params"], half["grads"]) == (2 * all_, 2 * trainable)
            assert half["state_by_name"]["exp_avg"] == 2 * trainable


def test_zero1_keeps_about_a_world_size_th_of_the_state_and_whole_gradients(measured):
    for n in (2, 4):
        ddp = measured["by_world"][n]["ddp"][0]
        zero = measured["by_world"][n]["zero1"]
        for rank in zero:
            assert (rank["params"], rank["grads"]) == (ddp["params"], ddp["grads"])
            assert abs(rank["state"] / ddp["state"] - 1 / n) < 0.25 / n, rank
        # Each parameter's state is on exactly one rank: together, DDP's.
        moments = ("exp_avg", "exp_avg_sq")
        assert [sum(r["state_by_name"][m] for r in zero) for m in moments] == [
            ddp["state_by_name"][m] for m in moments
        ]


def test_fsdp2_keeps_a_world_size_th_of_parameters_gradients_and_state(measured):
    for n in (2, 4):
        ddp = measured["by_world"][n]["ddp"][0]
        fsdp = measured["by_world"][n]["fsdp2"]
        for part in ("params", "grads"):
            assert sum(r[part] for r in fsdp) == ddp[part]  # the shards make the whole
            for rank in fsdp:
                assert abs(rank[part] / ddp[part] - 1 / n) < 0.05 / n, (part, rank)
        for rank in fsdp:
            moments = rank["state"] - rank["state_by_name"]["step"]
            assert moments == 2 * rank["grads"]


def test_the_table_says_each_schemes_kib_a_rank_as_measured(measured):
    lines = sharding.memory_table(measured).splitlines()
    assert len(lines) == 2 * len(sharding.SCHEMES)
    assert lines[0] == (
        "2 ranks, DDP, on each rank: parameters 67.8 KiB, gradients 67.8 KiB, optimizer state "
        "135.5 KiB (measured); for each parameter of the model, the fullest rank holds 16.0 "
        "bytes (measured)"
    )
    assert lines[1].startswith("2 ranks, DDP, bf16 parameters, on each rank: parameters 33.9")
    assert lines[7].startswith("4 ranks, FSDP2, on each rank: parameters 16.8 to 17.1 KiB")
    assert lines[7].endswith("the fullest rank holds 4.0 bytes (measured)")


def test_the_picture_has_a_stacked_bar_for_each_rank_of_each_scheme(measured):
    import matplotlib.pyplot as plt

    from ddp_helpers import i18n

    for language in ("en", "ja"):
        with i18n.using(language):
            fig = sharding.plot_memory(measured)
        try:
            panels = fig.axes
            assert len(panels) == 2
            for ax, n in zip(panels, (2, 4), strict=True):
                # One container a part (parameters, gradients, state), a bar in each per rank.
                assert [len(c) for c in ax.containers] == [len(sharding.SCHEMES) * n] * 3
                labels = [t.get_text() for t in ax.get_xticklabels()]
                assert labels[0] == "DDP" and labels[-1] == "FSDP2"
            legend = [t.get_text() for t in panels[0].get_legend().get_texts()]
            if language == "en":
                assert legend == ["parameters", "gradients", "optimizer state"]
            else:
                assert legend == ["パラメータ", "勾配", "オプティマイザの状態"]
            fig.canvas.draw()
        finally:
            plt.close(fig)


def test_ddp_all_reduces_the_gradients_once_and_broadcasts_its_buffers(traffic):
    trainable = traffic["trainable"]
    calls = [(c["op"], c["phase"], c["bytes"]) for c in traffic["calls"]["ddp"]]
    assert calls == [
        ("broadcast", "forward", 4 * sharding.WIDTH),
        ("all_reduce", "backward", 4 * trainable),
    ]
    assert traffic["sent"]["ddp"] == 2 * (2 - 1) / 2 * 4 * trainable


def test_fsdp2_gathers_the_root_once_and_each_block_twice_then_scatters_the_gradients(traffic):
    calls = traffic["calls"]["fsdp"]
    block = 4 * (sharding.WIDTH**2 + sharding.WIDTH)
    gathered = {
        phase: [c["bytes"] for c in calls if (c["op"], c["phase"]) == ("all_gather", phase)]
        for phase in ("forward", "backward")
    }
    assert len(gathered["forward"]) == sharding.DEPTH + 1  # each block, and the root
    assert sum(gathered["forward"]) == 4 * traffic["parameters"]  # the frozen bias too
    assert gathered["backward"] == [block] * sharding.DEPTH  # the root is not gathered again
    scattered = [c["bytes"] for c in calls if c["op"] == "reduce_scatter"]
    assert len(scattered) == sharding.DEPTH + 1 and sum(scattered) == 4 * traffic["trainable"]
    assert {c["phase"] for c in calls} == {"forward", "backward"}  # the step sends nothing
    three_passes = 3 * (2 - 1) / 2 * 4 * traffic["trainable"]
    assert traffic["sent"]["fsdp"] == sum(c["bytes"] for c in calls) / 2 < three_passes


def test_gloo_runs_each_reduce_scatter_as_an_all_reduce_of_the_whole_tensor(traffic):
    for key in ("ddp", "fsdp"):
        # Every collective gloo ran is one the demo counted: nothing else crossed.
        assert len(traffic["ran"][key]) == len(traffic["calls"][key])
    ran = traffic["ran"]["fsdp"]
    scattered = [c["bytes"] for c in traffic["calls"]["fsdp"] if c["op"] == "reduce_scatter"]
    assert [c["bytes"] for c in ran if c["op"] == "all_reduce"] == scattered
    assert not [c for c in ran if c["op"] == "reduce_scatter"]
    assert traffic["sent_as_run"]["ddp"] == traffic["sent"]["ddp"]
    assert traffic["sent_as_run"]["fsdp"] == traffic["sent"]["fsdp"] + sum(scattered) / 2


def test_the_traffic_table_sets_a_prediction_beside_what_was_counted(traffic):
    predicted = {"ddp": 1.0, "fsdp": 2.0}
    lines = sharding.traffic_table(traffic, predicted).splitlines()
    assert "FSDP2, 2 ranks, forward: 5 x all-gather, in all 69,384 bytes (measured)" in lines
    assert "FSDP2, 2 ranks, as gloo ran it: 5 x all-reduce, in all 69,376 bytes (measured)" in lines
    assert lines[-2:] == [
        "FSDP2: counted as rings from the calls above, each rank sends 102,660 bytes a step; "
        "from the calls gloo ran, 137,348 bytes",
        "FSDP2: 2 bytes (predicted) a step",
    ]
    assert any(line.startswith("DDP also broadcasts its buffers") for line in lines)


def test_the_tables_speak_japanese_in_the_japanese_edition(measured, traffic):
    from ja_guard import english_in_japanese

    from ddp_helpers import i18n

    with i18n.using("ja"):
        lines = [
            *sharding.memory_table(measured).splitlines(),
            *sharding.traffic_table(traffic, {"ddp": 1.0, "fsdp": 2.0}).splitlines(),
        ]
    assert lines[0].startswith("2 ランク、DDP: 1 ランクあたりパラメータ 67.8 KiB")
    assert "FSDP2: 1 ステップあたり 2 バイト（予測）" in lines
    assert [line for line in lines if english_in_japanese(line)] == []
