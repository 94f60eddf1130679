"""Pictures the lessons draw: ranks placed on machines and GPUs (lesson 01)."""

from __future__ import annotations

import re
import textwrap
import unicodedata

from .. import i18n

# Every word the pictures show, so that the Japanese edition's pictures are in Japanese.
MESSAGES = i18n.messages(
    "pictures",
    {
        "machine": "machine (node) {node}",
        "rank_box": "rank {rank}\nlocal {local}\ncuda:{local}",
        "nodes_title": "RANK counts across machines; LOCAL_RANK (and the GPU) restarts on each",
        "rank_zero_legend": "rank 0 of the whole job: serves the rendezvous, prints and saves",
        "other_ranks_legend": "the other ranks",
        "without_set_epoch": "without set_epoch",
        "with_set_epoch": "with set_epoch(epoch)",
        "position": "position in the epoch",
        "rank_epoch": "rank {rank}, epoch {epoch}",
        "orders_title": "Which item each rank visits, step by step (colour = item index)",
        "wrap": "1  wrap: DDP(model)",
        "wrap_caption": "Every rank starts from rank 0's weights and buffers.",
        "forward": "2  forward",
        "forward_caption": (
            "Each rank runs its own batch. Dashed: rank 0's buffers (BatchNorm's statistics), "
            "sent first unless the previous forward ran under no_grad or inside no_sync()."
        ),
        "backward": "3  backward",
        "backward_caption": (
            "A hook copies each gradient, times 1/world size, into its bucket. Once "
            "a bucket holds all its gradients, its all_reduce (a sum) starts while backward "
            "computes the rest. From the second step: first bucket 1 MiB, the others "
            "25 MiB (the first step has one). Then every rank holds the average gradient."
        ),
        "step": "4  optimizer.step()",
        "step_caption": (
            "Same gradients, same weights: the same step on every rank, so the copies stay "
            "identical."
        ),
        "rank": "rank {rank}",
        "model": "model",
        "broadcast": "broadcast\nparameters\n+ buffers",
        "forward_box": "forward on\nown batch",
        "buffers_unless": "buffers, unless\nthe previous forward\nran under no_grad",
        "gradient_of": "gradient\nof layer {layer}",
        "bucket": "bucket {n}",
        "all_reduce_0": "all_reduce bucket 0",
        "all_reduce_1": "all_reduce\nbucket 1",
        "time": "time",
        "step_box": "step with the\naveraged gradients",
        "no_communication": "no communication",
    },
)


def use_fonts() -> None:
    """Give matplotlib a font for the current language (Japanese: IPAexGothic, shipped with
    matplotlib-fontja), so that no label is drawn as empty boxes. Japanese figures are also
    drawn at twice the pixel density, shown at the same size: at 100 pixels an inch a
    kanji of many strokes (層) is a blot at a figure's 8-10 points."""
    if i18n.current() == "ja":
        import matplotlib_fontja

        matplotlib_fontja.japanize()
        _retina()


def _retina() -> None:
    """Inline figures as PNG at twice the resolution (IPython's "retina" format)."""
    try:
        from IPython import get_ipython
        from matplotlib_inline.backend_inline import set_matplotlib_formats
    except ImportError:  # not in a notebook: nothing shows the figure inline
        return
    if get_ipython() is not None:
        set_matplotlib_formats("retina")


# Japanese line-breaking rules (kinsoku): no line starts with these, none ends with those.
_NO_START = "、。，．）」』！？・ーッャュョァィゥェォっゃゅょぁぃぅぇぉ"
_NO_END = "（「『"


def wrap(text: str, width: int) -> str:
    """`text` in lines of about `width` columns. Japanese, which has no spaces, breaks
    between any two of its characters (each two columns wide), never inside a Latin word
    (`no_sync()`), by its rules (no line begins with closing punctuation, a small kana or
    ー, none ends with an opening bracket), and leaves no last line of one or two
    characters (「す。」 alone): the lines above it are made shorter."""

    def wide(ch: str) -> bool:
        return unicodedata.east_asian_width(ch) in "WF"

    if not any(wide(ch) for ch in text):
        return textwrap.fill(text, width=width)
    for narrower in range(0, min(width // 2, 12), 2):
        lines = _japanese_lines(text, width - narrower, wide)
        last = sum(2 if wide(ch) else 1 for ch in lines[-1])
        if len(lines) == 1 or last > 4:
            break
    return "\n".join(lines)


def _japanese_lines(text: str, width: int, wide) -> list[str]:
    lines, line, used = [], "", 0
    for token in re.findall(r"[^\s\u3000-\u9fff\uff00-\uffef]+|\s+|.", text):
        cost = sum(2 if wide(ch) else 1 for ch in token)
        breakable = token not in _NO_START and not token.isspace() and line[-1:] not in _NO_END
        if line and used + cost > width and breakable:
            lines.append(line.rstrip())
            line, used = "", 0
        if not line and token.isspace():
            continue
        line, used = line + token, used + cost
    return [*lines, line.rstrip()]


def draw_nodes(envs):
    """Each machine as a box, each of its ranks on its GPU: rank, local rank, cuda:LOCAL_RANK.

    `envs` holds one dict per rank with RANK, GROUP_RANK and LOCAL_RANK (ints), as the
    launcher's or torchrun's environment gives them.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch, Patch

    use_fonts()
    nodes = sorted({e["GROUP_RANK"] for e in envs})
    per_node = max(e["LOCAL_RANK"] for e in envs) + 1
    fig, ax = plt.subplots(figsize=(2.6 * len(nodes) + 0.4, 2.8))
    for node in nodes:
        x0 = node * 2.6
        ax.add_patch(
            FancyBboxPatch(
                (x0 + 0.1, 0.1), 2.3, 2.0, boxstyle="round,pad=0.02", fc="#eef3fb", ec="#4a6fa5"
            )
        )
        ax.text(x0 + 1.25, 1.85, MESSAGES["machine"].format(node=node), ha="center", fontsize=10)
        width = 2.1 / per_node
        for e in (e for e in envs if e["GROUP_RANK"] == node):
            gx = x0 + 0.2 + e["LOCAL_RANK"] * width
            ax.add_patch(
                FancyBboxPatch(
                    (gx + 0.05, 0.25),
                    width - 0.1,
                    1.35,
                    boxstyle="round,pad=0.02",
                    fc="#76b900" if e["RANK"] == 0 else "#cfe8a5",
                    ec="#3d6000",
                )
            )
            label = MESSAGES["rank_box"].format(rank=e["RANK"], local=e["LOCAL_RANK"])
            ax.text(gx + width / 2, 0.92, label, ha="center", va="center", fontsize=9)
    ax.set_xlim(0, 2.6 * len(nodes) + 0.1)
    ax.set_ylim(0, 2.2)
    ax.axis("off")
    ax.set_title(MESSAGES["nodes_title"], fontsize=9)
    key = [
        Patch(fc="#76b900", ec="#3d6000", label=MESSAGES["rank_zero_legend"]),
        Patch(fc="#cfe8a5", ec="#3d6000", label=MESSAGES["other_ranks_legend"]),
    ]
    ax.legend(
        handles=key,
        loc="upper center",
        bbox_to_anchor=(0.5, 0.0),
        ncol=2,
        fontsize=8,
        frameon=False,
    )
    fig.tight_layout()
    return fig


def plot_epoch_orders(without, with_set_epoch):
    """The order each rank visits its items in, epoch by epoch, without and with set_epoch.

    Each argument is `orders[rank][epoch]` = the list of indices (lesson 04).
    """
    import matplotlib.pyplot as plt

    use_fonts()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.2), sharey=True)
    for ax, orders, title in (
        (axes[0], without, MESSAGES["without_set_epoch"]),
        (axes[1], with_set_epoch, MESSAGES["with_set_epoch"]),
    ):
        grid = [row for per_rank in orders for row in per_rank]
        ax.imshow(grid, cmap="viridis", aspect="auto")
        ax.set_title(title)
        ax.set_xlabel(MESSAGES["position"])
        labels = [
            MESSAGES["rank_epoch"].format(rank=r, epoch=e)
            for r, per in enumerate(orders)
            for e in range(len(per))
        ]
        ax.set_yticks(range(len(grid)), labels)
        for y, row in enumerate(grid):
            for x, index in enumerate(row):
                ax.text(x, y, index, ha="center", va="center", fontsize=7, color="white")
    fig.suptitle(MESSAGES["orders_title"])
    fig.tight_layout()
    plt.show()


_COMM = "#c2410c"  # what crosses between ranks, in DDP's life cycle


class _LifeCycle:
    """The parts of draw_ddp_life_cycle's picture: two rank lanes across four panels."""

    lanes = {0: 3.2, 1: 1.5}  # bottom of each rank's row
    h = 0.75
    middle = (lanes[1] + h + lanes[0]) / 2

    def __init__(self, ax):
        self.ax = ax

    def box(self, x, y, w, text, fc, ec="#3d6000", height=h, size=8.5):
        from matplotlib.patches import FancyBboxPatch

        patch = FancyBboxPatch((x, y), w, height, boxstyle="round,pad=0.02", fc=fc, ec=ec)
        self.ax.add_patch(patch)
        self.ax.text(x + w / 2, y + height / 2, text, ha="center", va="center", fontsize=size)

    def down(self, x, style="-|>", ls="-"):
        from matplotlib.patches import FancyArrowPatch

        start, end = (x, self.lanes[0]), (x, self.lanes[1] + self.h)
        arrow = FancyArrowPatch(
            start, end, arrowstyle=style, mutation_scale=12, lw=1.6, ls=ls, color=_COMM
        )
        self.ax.add_patch(arrow)

    def on_both_ranks(self, x, w, text):
        for rank, y in self.lanes.items():
            self.box(x, y, w, text, "#76b900" if rank == 0 else "#cfe8a5")

    def panels(self):
        from matplotlib.patches import FancyBboxPatch

        stages = [
            (0.0, 2.3, MESSAGES["wrap"], MESSAGES["wrap_caption"]),
            (2.5, 2.3, MESSAGES["forward"], MESSAGES["forward_caption"]),
            (5.0, 4.5, MESSAGES["backward"], MESSAGES["backward_caption"]),
            (9.7, 2.3, MESSAGES["step"], MESSAGES["step_caption"]),
        ]
        for x, w, title, caption in stages:
            frame = FancyBboxPatch(
                (x, 0.05), w, 4.5, boxstyle="round,pad=0.02", fc="#eef3fb", ec="#4a6fa5"
            )
            self.ax.add_patch(frame)
            # IPAexGothic (Japanese) has no bold face: matplotlib would warn and use regular.
            weight = "normal" if i18n.current() == "ja" else "bold"
            self.ax.text(x + w / 2, 4.3, title, ha="center", fontsize=10, weight=weight)
            wrapped = wrap(caption, width=int(w * 12.5))
            self.ax.text(x + 0.1, 1.3, wrapped, va="top", fontsize=7.8)
        for rank, y in self.lanes.items():
            label = MESSAGES["rank"].format(rank=rank)
            self.ax.text(-0.12, y + self.h / 2, label, ha="right", va="center", fontsize=10)

    def wrap_and_forward(self):
        # 1 wrap: rank 0's parameters and buffers go to every rank.
        self.on_both_ranks(0.2, 1.9, MESSAGES["model"])
        self.down(1.15)
        self.ax.text(1.25, self.middle, MESSAGES["broadcast"], va="center", fontsize=8, color=_COMM)
        # 2 forward: the buffers again, but only after a forward with gradients.
        self.on_both_ranks(3.2, 1.45, MESSAGES["forward_box"])
        self.down(2.75, ls="--")
        text = MESSAGES["buffers_unless"]
        self.ax.text(2.85, self.middle, text, va="center", fontsize=7.5, color=_COMM)

    def backward(self):
        # 3 backward: the last layer's gradient comes first; two buckets; each all_reduce
        # starts when its bucket is full and overlaps the gradients still being computed.
        ax, lanes, middle = self.ax, self.lanes, self.middle
        w, gap, x0 = 0.95, 0.08, 5.2
        fills = [("#fde2c4", _COMM), ("#dbe7f6", "#4a6fa5"), ("#dbe7f6", "#4a6fa5")]
        for y in lanes.values():
            for i, (fc, ec) in enumerate(fills):
                label = MESSAGES["gradient_of"].format(layer=3 - i)
                self.box(x0 + i * (w + gap), y, w, label, fc, ec=ec, size=8)
        end3 = x0 + 3 * w + 2 * gap
        for left, right, label, color in (
            (x0, x0 + w, MESSAGES["bucket"].format(n=0), _COMM),
            (x0 + w + gap, end3, MESSAGES["bucket"].format(n=1), "#4a6fa5"),
        ):
            top = lanes[0] + self.h + 0.08
            ax.plot(
                [left, left, right, right], [top, top + 0.06, top + 0.06, top], color=color, lw=1
            )
            ax.text((left + right) / 2, top + 0.1, label, ha="center", fontsize=8, color=color)
        for start, end, label, y in (
            (x0 + w, x0 + 2.6 * w, MESSAGES["all_reduce_0"], middle + 0.2),
            (end3, 9.35, MESSAGES["all_reduce_1"], middle - 0.2),
        ):
            self.box(
                start + 0.08, y - 0.2, end - start - 0.1, label, "#fff7ed", ec=_COMM,
                height=0.4, size=7.5,
            )  # fmt: skip
            self.down(start + 0.04, style="<|-|>")
        ax.annotate(
            "",
            xy=(9.35, lanes[1] - 0.12),
            xytext=(x0, lanes[1] - 0.12),
            arrowprops=dict(arrowstyle="->", color="#555555"),
        )
        time_label = MESSAGES["time"]
        ax.text(
            9.3, lanes[1] - 0.2, time_label, ha="right", va="top", fontsize=7.5, color="#555555"
        )

    def step(self):
        # 4 step: local, nothing crosses.
        self.on_both_ranks(9.95, 1.8, MESSAGES["step_box"])
        text = MESSAGES["no_communication"]
        self.ax.text(10.85, self.middle, text, ha="center", va="center", fontsize=8)


def draw_ddp_life_cycle():
    """DDP's four moments on 2 ranks: wrap, forward, backward, step, and what each sends.

    Lesson 03. The backward panel shows a model of three layers whose gradients fill two
    buckets; each bucket's all_reduce starts once all its gradients are in.
    """
    import matplotlib.pyplot as plt

    use_fonts()
    fig, ax = plt.subplots(figsize=(12, 4.6))
    picture = _LifeCycle(ax)
    picture.panels()
    picture.wrap_and_forward()
    picture.backward()
    picture.step()
    ax.set_xlim(-0.9, 12.1)
    ax.set_ylim(0, 4.65)
    ax.axis("off")
    fig.tight_layout()
    return fig
