"""The pictures the lessons draw: each draws without error and returns its figure."""

from __future__ import annotations


def test_the_ddp_life_cycle_is_drawn_as_one_figure_with_its_four_moments():
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    from ddp_helpers.demos.pictures import draw_ddp_life_cycle

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


def test_japanese_captions_break_lines_by_japanese_rules():
    from ddp_helpers import i18n
    from ddp_helpers.demos.pictures import _NO_END, _NO_START, MESSAGES, wrap

    assert wrap("あいうえおかきくけこさしすせそたちつてとなにぬねのはひふへほまみむめもす。", 20)
    with i18n.using("ja"):
        captions = [MESSAGES[k] for k in MESSAGES if k.endswith("caption")]
    assert captions and any("。" in c for c in captions)
    for caption in captions:
        for width in (28, 56):  # the picture's narrow and wide panels, in columns
            lines = wrap(caption, width).split("\n")
            assert all(line[:1] not in _NO_START for line in lines[1:]), lines
            assert all(line[-1:] not in _NO_END for line in lines), lines
            assert len(lines) == 1 or len(lines[-1]) > 2, lines  # no 「す。」 alone
    for width in (12, 14):  # once a line began with ー, once 「す。」 stood alone
        tight = wrap("ワールドサイズで割ってバケットにコピーします。", width).split("\n")
        assert tight[-1] != "す。" and all(line[:1] not in _NO_START for line in tight), tight
