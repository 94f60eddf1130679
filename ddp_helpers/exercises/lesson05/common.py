"""What lesson 05's cells and checks share: the model, its blocks and the batches.

The model has what makes sharding honest: several blocks (FSDP2 shards each, then the root),
parameters of unequal sizes (shards over 3 ranks are uneven), a frozen parameter (the head's
bias: no gradient, no optimizer state) and a buffer (`shift`: state, not a parameter)."""

from __future__ import annotations

WIDTH, DEPTH, INPUTS, OUTPUTS = 16, 3, 8, 2


def _modules():
    import torch
    from torch import nn

    class Block(nn.Module):
        """A residual block: x + tanh(linear(x))."""

        def __init__(self, width):
            super().__init__()
            self.linear = nn.Linear(width, width)

        def forward(self, x):
            return x + torch.tanh(self.linear(x))

    class Net(nn.Module):
        """embed -> blocks -> head; `blocks` is what FSDP2 shards one by one."""

        def __init__(self, width, depth):
            super().__init__()
            self.embed = nn.Linear(INPUTS, width)
            self.blocks = nn.ModuleList(Block(width) for _ in range(depth))
            self.head = nn.Linear(width, OUTPUTS)
            self.head.bias.requires_grad_(False)  # frozen: never stepped
            self.register_buffer("shift", torch.linspace(-0.5, 0.5, width))

        def forward(self, x):
            h = self.embed(x) + self.shift
            for block in self.blocks:
                h = block(h)
            return self.head(h)

    return Block, Net


def make_model(width=WIDTH, depth=DEPTH, seed=0, dtype=None):
    """The lesson's model, seeded so that every rank and every run builds the same one."""
    import torch

    _, Net = _modules()
    torch.manual_seed(seed)
    model = Net(width, depth)
    return model.to(dtype) if dtype is not None else model


def make_batches(steps, rows, seed=1, dtype=None):
    """`steps` global batches of `rows` rows: inputs (steps, rows, INPUTS), targets
    (steps, rows, OUTPUTS). Rank r of W takes rows r*rows//W .. (r+1)*rows//W of each."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(steps, rows, INPUTS, generator=gen)
    y = torch.randn(steps, rows, OUTPUTS, generator=gen)
    return (x.to(dtype), y.to(dtype)) if dtype is not None else (x, y)


def my_rows(batch, rank, world_size):
    """This rank's equal share of one global batch's rows (rows divisible by world_size)."""
    per = batch.shape[0] // world_size
    return batch[rank * per : (rank + 1) * per]
