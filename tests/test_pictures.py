"""The pictures the lessons draw: each draws without error and returns its figure."""

from __future__ import annotations


def test_the_ddp_life_cycle_is_drawn_as_one_figure_with_its_four_moments():
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    from ddp_helpers.pictures import draw_ddp_life_cycle

    fig = draw_ddp_life_cycle()
    try:
        assert isinstance(fig, Figure)
        texts = " ".join(t.get_text() for t in fig.axes[0].texts)
        for moment in ("wrap", "forward", "backward", "optimizer.step()"):
            assert moment in texts
        assert "1 MiB" in texts and "25 MiB" in texts
        fig.canvas.draw()  # lays the text out: fails on a broken artist
    finally:
        plt.close(fig)
