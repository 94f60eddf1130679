"""What exercise 5.1's check (ZeRO-1 by hand) and its messages say of torch's optimizers,
shown in one process with the pinned torch (no ranks: each is about one rank's optimizer).

Here, not in tests/claims/, because every test there backs a row of docs/claims.md, and a
row names a lesson's cell: once lesson 05's notebook says one of these, the test moves there
with its row."""

from __future__ import annotations

import pytest


def _params(seed: int = 0, device: str = "cpu"):
    """A few parameters of uneven sizes, the last frozen, each but the last with a gradient."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    shapes = [(16, 8), (16,), (16, 16), (16,), (2, 16), (2,)]
    params = [torch.nn.Parameter(torch.randn(s, generator=gen).to(device)) for s in shapes]
    params[-1].requires_grad_(False)
    for p in params[:-1]:
        p.grad = torch.randn(p.shape, generator=gen).to(device)
    return params


def _copy(params):
    import torch

    copies = [torch.nn.Parameter(p.detach().clone(), requires_grad=p.requires_grad) for p in params]
    for c, p in zip(copies, params, strict=True):
        c.grad = None if p.grad is None else p.grad.clone()
    return copies


def _sgd(params):
    import torch

    return torch.optim.SGD(params, lr=0.05, momentum=0.9)


def _adamw(params):
    import torch

    return torch.optim.AdamW(params, lr=0.01, weight_decay=0.1)


OPTIMIZERS = {"SGD(momentum=0.9)": _sgd, "AdamW": _adamw}  # 5.1's check draws these two


@pytest.mark.parametrize("make", OPTIMIZERS.values(), ids=list(OPTIMIZERS))
def test_an_optimizer_refuses_an_empty_list_of_parameters(make):
    # 5.1's zero_world message: a rank given no shard cannot build its optimizer.
    with pytest.raises(ValueError, match="empty parameter list"):
        make([])


@pytest.mark.parametrize("make", OPTIMIZERS.values(), ids=list(OPTIMIZERS))
def test_an_optimizer_over_p_data_never_changes_the_model(make):
    # 5.1's zero_not_params message: p.data is another tensor (on the same storage) with no
    # gradient, and an optimizer skips a tensor whose .grad is None.
    params = _params()
    before = [p.detach().clone() for p in params]
    optimizer = make([p.data for p in params])
    optimizer.step()
    assert all(p.equal(b) for p, b in zip(params, before, strict=True))
    assert len(optimizer.state) == 0


@pytest.mark.parametrize("make", OPTIMIZERS.values(), ids=list(OPTIMIZERS))
def test_a_frozen_parameter_given_to_an_optimizer_gets_no_state_and_never_changes(make):
    # Why 5.1 lets the frozen bias be left out or given: no gradient, no state, no update
    # (AdamW's weight decay included).
    params = _params()
    frozen = params[-1].detach().clone()
    optimizer = make(params)
    for _ in range(2):
        optimizer.step()
    assert params[-1].equal(frozen) and params[-1] not in optimizer.state
    assert all(p in optimizer.state for p in params[:-1])


def _sharded_equals_whole(make, device: str) -> bool:
    """One step of the whole optimizer against one optimizer per shard (3 shards, the
    greedy ones of 5.1's reference), on the same parameters and gradients: bit for bit?"""
    whole = _params(device=device)
    sharded = _copy(whole)
    trainable = [p for p in sharded if p.requires_grad]
    held, owner = [0, 0, 0], {}
    for p in sorted(trainable, key=lambda p: p.numel(), reverse=True):
        owner[p] = held.index(min(held))
        held[owner[p]] += p.numel()
    shards = [[p for p in trainable if owner[p] == r] for r in range(3)]
    whole_optimizer, optimizers = make(whole), [make(shard) for shard in shards]
    for _ in range(3):  # the state (momentum, moments, step counts) carried too
        whole_optimizer.step()
        for optimizer in optimizers:
            optimizer.step()
    return all(a.equal(b) for a, b in zip(whole, sharded, strict=True))


@pytest.mark.parametrize("make", OPTIMIZERS.values(), ids=list(OPTIMIZERS))
def test_optimizers_over_shards_step_each_parameter_bit_for_bit_as_the_whole_one(make):
    # 5.1's check compares bit for bit: per parameter, the update does not depend on which
    # other parameters the optimizer holds (on the CPU the default is a loop over them).
    assert _sharded_equals_whole(make, "cpu")


@pytest.mark.parametrize("make", OPTIMIZERS.values(), ids=list(OPTIMIZERS))
def test_on_a_gpu_too_where_the_default_is_foreach(make):
    # On CUDA the default implementation steps a list of tensors at once (foreach): grouped
    # otherwise, each element still gets the same arithmetic.
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no GPU here")
    assert _sharded_equals_whole(make, "cuda")


def test_adamw_hardly_tells_a_gradient_from_half_of_it():
    # Why 5.1's check names "gradients averaged twice" under AdamW by comparing with the step
    # of the divided gradients, not by the size of the update: Adam's first update is about
    # lr * sign(g) whatever g's scale, apart only where eps counts.
    full, half = _params(), _params()
    for p in half[:-1]:
        p.grad /= 2
    for params in (full, half):
        _adamw(params).step()
    start = _params()
    moved = [(f - s).abs().max().item() for f, s in zip(full[:-1], start[:-1], strict=True)]
    apart = [(f - h).abs().max().item() for f, h in zip(full[:-1], half[:-1], strict=True)]
    assert max(apart) > 0.0  # not bit for bit ...
    assert max(apart) < 1e-4 * min(moved)  # ... but well within any tolerance on the update
