"""Pictures the lessons draw: ranks placed on machines and GPUs (lesson 01)."""

from __future__ import annotations


def draw_nodes(envs):
    """Each machine as a box, each of its ranks on its GPU: rank, local rank, cuda:LOCAL_RANK.

    `envs` holds one dict per rank with RANK, GROUP_RANK and LOCAL_RANK (ints), as the
    launcher's or torchrun's environment gives them.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    nodes = sorted({e["GROUP_RANK"] for e in envs})
    per_node = max(e["LOCAL_RANK"] for e in envs) + 1
    fig, ax = plt.subplots(figsize=(2.6 * len(nodes) + 0.4, 2.4))
    for node in nodes:
        x0 = node * 2.6
        ax.add_patch(
            FancyBboxPatch(
                (x0 + 0.1, 0.1), 2.3, 2.0, boxstyle="round,pad=0.02", fc="#eef3fb", ec="#4a6fa5"
            )
        )
        ax.text(x0 + 1.25, 1.85, f"machine (node) {node}", ha="center", fontsize=10)
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
            label = f"rank {e['RANK']}\nlocal {e['LOCAL_RANK']}\ncuda:{e['LOCAL_RANK']}"
            ax.text(gx + width / 2, 0.92, label, ha="center", va="center", fontsize=9)
    ax.set_xlim(0, 2.6 * len(nodes) + 0.1)
    ax.set_ylim(0, 2.2)
    ax.axis("off")
    ax.set_title(
        "RANK counts across machines; LOCAL_RANK (and the GPU) restarts on each", fontsize=9
    )
    fig.tight_layout()
    return fig


def plot_epoch_orders(without, with_set_epoch):
    """The order each rank visits its items in, epoch by epoch, without and with set_epoch.

    Each argument is `orders[rank][epoch]` = the list of indices (lesson 04).
    """
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.2), sharey=True)
    for ax, orders, title in (
        (axes[0], without, "without set_epoch"),
        (axes[1], with_set_epoch, "with set_epoch(epoch)"),
    ):
        grid = [row for per_rank in orders for row in per_rank]
        ax.imshow(grid, cmap="viridis", aspect="auto")
        ax.set_title(title)
        ax.set_xlabel("position in the epoch")
        labels = [f"rank {r}, epoch {e}" for r, per in enumerate(orders) for e in range(len(per))]
        ax.set_yticks(range(len(grid)), labels)
        for y, row in enumerate(grid):
            for x, index in enumerate(row):
                ax.text(x, y, index, ha="center", va="center", fontsize=7, color="white")
    fig.suptitle("Which item each rank visits, step by step (colour = item index)")
    fig.tight_layout()
    plt.show()
