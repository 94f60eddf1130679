"""The scaling measurement behind lesson 03's plot and benchmarks/scaling.py."""

from __future__ import annotations

import os

from ddp_helpers import i18n
from ddp_helpers.demos.scaling import measure_scaling, plot_scaling


def test_throughput_is_measured_for_each_world_size_with_one_thread_per_rank(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    result = measure_scaling((1, 2), repeats=1, steps=5, batch=64, warmup=1)
    assert sorted(result) == [1, 2] and all(rate > 0 for rate in result.values())
    assert os.environ["OMP_NUM_THREADS"] == "7"  # restored afterwards


def test_the_plot_shows_each_models_speed_up_and_the_ideal_line():
    fig = plot_scaling({"small": {1: 1000.0, 2: 500.0}, "wide": {1: 100.0, 2: 180.0}})
    ax = fig.axes[0]
    ideal, small, wide = ax.get_lines()
    assert list(ideal.get_ydata()) == [1, 2]
    assert list(small.get_ydata()) == [1.0, 0.5] and list(wide.get_ydata()) == [1.0, 1.8]
    assert [t.get_text() for t in ax.texts] == ["0.50x", "1.80x"]
    with i18n.using("ja"):  # the label is the catalog's: 倍, not x, in Japanese
        fig = plot_scaling({"small": {1: 1000.0, 2: 500.0}, "wide": {1: 100.0, 2: 180.0}})
    assert [t.get_text() for t in fig.axes[0].texts] == ["0.50 倍", "1.80 倍"]
