"""The all_reduce cost model behind lesson 03's Going further: arithmetic, fit, plot, a run."""

from __future__ import annotations

import pytest

from ddp_helpers.demos import communication as comm


def test_a_ring_all_reduce_sends_2_n_minus_1_over_n_of_the_tensor():
    assert comm.ring_bytes_sent(4_000_000, 2) == 4_000_000
    assert comm.ring_bytes_sent(4_000_000, 4) == 6_000_000
    assert comm.ring_bytes_sent(4_000_000, 1) == 0


def test_the_fit_recovers_latency_and_bandwidth_from_times_the_model_made():
    for n in (2, 4):
        times = {s: comm.ring_time(s, n, alpha=2e-4, beta=1.5e9) for s in comm.SIZES}
        alpha, beta = comm.fit_ring(times, n)
        assert alpha == pytest.approx(2e-4, rel=1e-6) and beta == pytest.approx(1.5e9, rel=1e-6)


def test_the_plot_has_the_measured_points_and_the_fitted_line_of_each_world_size():
    times = {n: {s: comm.ring_time(s, n, 1e-4, 1e9) for s in comm.SIZES} for n in (2, 4)}
    fig = comm.plot_all_reduce(times)
    ax = fig.axes[0]
    assert [line.get_label() for line in ax.lines] == [
        "2 ranks, measured",
        "2 ranks, ring model fitted",
        "4 ranks, measured",
        "4 ranks, ring model fitted",
    ]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"


def test_measured_on_real_ranks_times_grow_with_the_size_and_a_ddp_step_and_its_buckets_are_timed():
    # 4 KiB against 64 MiB: under load a small message has taken 3 ms (CI), while 64 MiB
    # over loopback takes tens of ms even at several GB/s.
    measured = comm.measure_all_reduce(ranks=(2,), sizes=(4096, 64 * 2**20), repeats=3)
    small, large = measured[2][4096], measured[2][64 * 2**20]
    assert 0 < small < large
    step = comm.time_ddp_step(hidden=64, layers=1, world_size=2, steps=2)
    assert step["span"] > 0 and sum(step["bucket_bytes"]) == 4 * (8 * 64 + 64 + 64 + 1)
    # Each bucket's all_reduce timed alone, one time per bucket.
    assert len(step["alone"]) == len(step["bucket_bytes"]) and min(step["alone"]) > 0


def test_the_ring_pictured_sums_each_part_once_then_spreads_it_in_2_n_minus_1_steps():
    import matplotlib.pyplot as plt

    for n in (2, 3, 4):
        states = comm.ring_states(n)
        assert len(states) == 1 + 2 * (n - 1)
        scattered, _ = states[n - 1]  # after the reduce-scatter: one finished part each
        assert sorted(row.count(n) for row in scattered) == [1] * n
        assert all(count == n for row in states[-1][0] for count in row)
        assert all(len(sent) == n for _, sent in states[1:])  # every rank sends every step
    fig = comm.draw_ring_all_reduce(4)
    fig.canvas.draw()
    plt.close(fig)


def test_the_overlap_picture_and_summary_show_each_ranks_backward_and_buckets():
    runs = [
        {"forward": 0.01, "backward": 0.05, "finish": 0.06,
         "calls": [{"start": 0.02, "end": 0.03, "size": 10}, {"start": 0.045, "end": 0.058,
                                                                "size": 5}]},
        {"forward": 0.01, "backward": 0.04, "finish": 0.06,
         "calls": [{"start": 0.02, "end": 0.035, "size": 10}, {"start": 0.04, "end": 0.06,
                                                                 "size": 5}]},
    ]  # fmt: skip
    fig = comm.plot_overlap(runs)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["rank 0", "rank 1"]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["forward", "backward", "all_reduce of a bucket"]
    assert comm.overlap_summary(runs).splitlines() == [
        "rank 0: backward, ms: 40 (measured); all_reduces done before it ended: 1 (measured) of 2",
        "rank 1: backward, ms: 30 (measured); all_reduces done before it ended: 1 (measured) of 2",
    ]


def test_mini_ddps_timeline_shows_all_reduces_that_start_while_backward_runs():
    from ddp_helpers.exercises import lesson03

    runs = lesson03.mini_ddp_timeline(hidden=256, layers=4, bucket_mb=0.25)
    assert len(runs) == 2
    for run in runs:
        assert 0 < run["forward"] < run["backward"] <= run["finish"]
        # 0.25 MiB is 256 x 256 floats: the last layer's 257 values join the one before
        # it, each other layer fills a bucket, and the first (64 x 256) is the last bucket.
        assert [c["size"] for c in run["calls"]] == [66049, 65792, 65792, 16640]
        assert run["calls"][0]["start"] < run["backward"]  # the first, during backward
        assert all(c["start"] <= c["end"] <= run["finish"] for c in run["calls"])
