"""Exercise 5.1's answers: learners' ShardedOptimizers, each wrong in one way its check must
name (the shards, the step, what is kept between instances, the ranks counted per machine, a
tensor made off the model's device), or right and written another way. DRAWN joins the sweep
(tests/exercises/test_answers.py) once lesson 05 is listed; until then
tests/exercises/drawn/test_ex_5_1.py runs it."""

from __future__ import annotations


class _Learners:
    """A learner's ShardedOptimizer, written out; the ones below change one part of it."""

    def __init__(self, params, make_optimizer):
        self.params = [p for p in params if p.requires_grad]
        self.owner = self.owners(self.params)
        mine = [p for p in self.params if self.owner[p] == self.rank()]
        self.optimizer = self.make(make_optimizer, mine)

    def rank(self):
        import torch.distributed as dist

        return dist.get_rank()

    def world(self):
        import torch.distributed as dist

        return dist.get_world_size()

    def owners(self, params):
        held, owner = [0] * self.world(), {}
        for p in sorted(params, key=lambda p: p.numel(), reverse=True):
            owner[p] = held.index(min(held))
            held[owner[p]] += p.numel()
        return owner

    def make(self, make_optimizer, mine):
        return make_optimizer(mine)

    def zero_grad(self):
        for p in self.params:
            p.grad = None

    def step(self):
        self.optimizer.step()
        self.share()

    def share(self):
        import torch
        import torch.distributed as dist

        with torch.no_grad():
            for p in self.params:
                dist.broadcast(p, src=self.owner[p])


# ---------------------------------------------------------------- the shards


class ShardedEveryRankStepsEverything(_Learners):
    """Every rank keeps the optimizer of the whole model: nothing to broadcast."""

    def make(self, make_optimizer, mine):
        return make_optimizer(self.params)

    def share(self):
        pass


class ShardedInOverlappingBlocks(_Learners):
    """Blocks of ceil(n / world) parameters, each one parameter too long."""

    def owners(self, params):
        per = -(-len(params) // self.world())
        return {p: min(i // per, self.world() - 1) for i, p in enumerate(params)}

    def __init__(self, params, make_optimizer):
        self.params = [p for p in params if p.requires_grad]
        self.owner = self.owners(self.params)
        per = -(-len(self.params) // self.world())
        mine = self.params[self.rank() * per : (self.rank() + 1) * per + 1]
        self.optimizer = make_optimizer(mine)


class ShardedInFloorBlocks(_Learners):
    """Blocks of n // world parameters: the remainder belongs to nobody."""

    def owners(self, params):
        per = len(params) // self.world()
        return {p: i // per for i, p in enumerate(params)}


class ShardedForTwoRanks(_Learners):
    """Even parameters on rank 0, odd ones on rank 1."""

    def owners(self, params):
        return {p: i % 2 for i, p in enumerate(params)}


class ShardedOnRankZero(_Learners):
    """Rank 0 keeps the whole optimizer and sends the others the new weights."""

    def owners(self, params):
        return dict.fromkeys(params, 0)


class ShardedRoundRobin(_Learners):
    """Parameter i on rank i % world: as many parameters on each rank, not as many elements."""

    def owners(self, params):
        return {p: i % self.world() for i, p in enumerate(params)}


class ShardedByLocalRank(_Learners):
    """The rank from LOCAL_RANK, as lesson 02 pinned devices."""

    def rank(self):
        import os

        return int(os.environ["LOCAL_RANK"])


class ShardedWithItsOwnAdamW(_Learners):
    """Builds AdamW itself, make_optimizer unused."""

    def make(self, make_optimizer, mine):
        import torch

        return torch.optim.AdamW(mine, lr=0.01)


class ShardedSteppingTheData(_Learners):
    """Hands the optimizer p.data, to keep autograd out of the update."""

    def make(self, make_optimizer, mine):
        return make_optimizer([p.data for p in mine])


class ShardedWithAClassList(_Learners):
    """The parameters in a list declared on the class: every instance appends to the same one."""

    params = []

    def __init__(self, params, make_optimizer):
        self.params.extend(p for p in params if p.requires_grad)
        self.owner = self.owners(self.params)
        mine = [p for p in self.params if self.owner[p] == self.rank()]
        self.optimizer = make_optimizer(mine)


class ShardedWithTheOptimizerOnTheClass(_Learners):
    """The optimizer stored on the class: the last one made is every instance's."""

    def __init__(self, params, make_optimizer):
        self.params = [p for p in params if p.requires_grad]
        self.owner = self.owners(self.params)
        mine = [p for p in self.params if self.owner[p] == self.rank()]
        ShardedWithTheOptimizerOnTheClass.optimizer = make_optimizer(mine)


# ---------------------------------------------------------------- the step


class ShardedWithoutBroadcast(_Learners):
    def share(self):
        pass


class ShardedBroadcastingBeforeTheStep(_Learners):
    def step(self):
        self.share()
        self.optimizer.step()


class ShardedAveragingAgain(_Learners):
    """Averages the gradients, as lesson 03's by-hand DDP did, before stepping."""

    def step(self):
        import torch.distributed as dist

        for p in self.params:
            dist.all_reduce(p.grad)
            p.grad /= self.world()
        super().step()


class ShardedAveragingAgainInOneBuffer(_Learners):
    """Averages the gradients again, in one flat buffer."""

    def step(self):
        import torch
        import torch.distributed as dist

        flat = torch.cat([p.grad.reshape(-1) for p in self.params])
        dist.all_reduce(flat)
        flat /= self.world()
        offset = 0
        for p in self.params:
            p.grad.copy_(flat[offset : offset + p.numel()].view_as(p))
            offset += p.numel()
        super().step()


class ShardedDividingAgain(_Learners):
    """Divides by the world size, as if DDP had summed."""

    def step(self):
        for p in self.params:
            p.grad /= self.world()
        super().step()


class ShardedSummingTheWeights(_Learners):
    """all_reduce where broadcast belongs: every rank's copy summed."""

    def share(self):
        import torch
        import torch.distributed as dist

        with torch.no_grad():
            for p in self.params:
                dist.all_reduce(p)


class ShardedInAFlatBufferOnTheCpu(_Learners):
    """One broadcast per owner, of a flat buffer made without device=."""

    def flat(self, theirs, owner):
        import torch

        flat = torch.empty(sum(p.numel() for p in theirs), dtype=theirs[0].dtype)
        if owner == self.rank():
            flat.copy_(torch.cat([p.reshape(-1) for p in theirs]))
        return flat

    def share(self):
        import torch
        import torch.distributed as dist

        with torch.no_grad():
            for owner in range(self.world()):
                theirs = [p for p in self.params if self.owner[p] == owner]
                flat = self.flat(theirs, owner)
                dist.broadcast(flat, src=owner)
                offset = 0
                for p in theirs:
                    p.copy_(flat[offset : offset + p.numel()].view_as(p))
                    offset += p.numel()


class ShardedBroadcastingItsOwnOnly(_Learners):
    """Each rank broadcasts the parameters it owns, and nothing else."""

    def share(self):
        import torch
        import torch.distributed as dist

        with torch.no_grad():
            for p in self.params:
                if self.owner[p] == self.rank():
                    dist.broadcast(p, src=self.rank())


class ShardedWithStepInsideInit:
    """step() indented one level too far: a function inside __init__, not a method."""

    def __init__(self, params, make_optimizer):
        import torch.distributed as dist

        self.params = [p for p in params if p.requires_grad]
        self.owner = _Learners.owners(self, self.params)
        self.optimizer = make_optimizer(
            [p for p in self.params if self.owner[p] == dist.get_rank()]
        )

        def step(self):
            self.optimizer.step()
            for p in self.params:
                dist.broadcast(p.detach(), src=self.owner[p])

    def world(self):
        import torch.distributed as dist

        return dist.get_world_size()

    def zero_grad(self):
        for p in self.params:
            p.grad = None


class ShardedDividingAgainUnderAdamW(_Learners):
    """Divides by the world size again, but only under AdamW, whose update hardly changes with
    the gradients' scale (the SGD cases pass): how the check tells it apart under Adam."""

    def step(self):
        import torch

        if isinstance(self.optimizer, torch.optim.AdamW):
            for p in self.params:
                p.grad /= self.world()
        super().step()


class ShardedWhoseStepRaises(_Learners):
    def step(self):
        raise RuntimeError("the learner's own bug")


# ---------------------------------------------------------------- right, written otherwise


class ShardedGreedyInTheModelsOrder(_Learners):
    """Each parameter, in the model's order (no sort), to the rank with the fewest elements so
    far; the parameters handed over as one param group."""

    def owners(self, params):
        held, owner = [0] * self.world(), {}
        for p in params:
            owner[p] = min(range(self.world()), key=lambda r: held[r])
            held[owner[p]] += p.numel()
        return owner

    def make(self, make_optimizer, mine):
        return make_optimizer([{"params": mine}])


class ShardedInAFlatBufferPerOwner(ShardedInAFlatBufferOnTheCpu):
    """One broadcast per owner, of a flat buffer made from the parameters (on their device)."""

    def flat(self, theirs, owner):
        import torch

        return torch.cat([p.reshape(-1) for p in theirs])


class ShardedSharingBySum(_Learners):
    """Non-owners zero their copy and every rank all-reduces: the sum is the owner's value."""

    def share(self):
        import torch
        import torch.distributed as dist

        with torch.no_grad():
            for p in self.params:
                if self.owner[p] != self.rank():
                    p.zero_()
                dist.all_reduce(p)


class ShardedWithTheDataBroadcast(_Learners):
    """Broadcasts p.data, owners found by index."""

    def share(self):
        import torch.distributed as dist

        for p in self.params:
            dist.broadcast(p.data, self.owner[p])


DRAWN = {
    "5.1": (
        [
            (ShardedEveryRankStepsEverything, "zero_all"),
            (ShardedInOverlappingBlocks, "zero_overlap"),
            (ShardedInFloorBlocks, "zero_missing"),
            (ShardedForTwoRanks, "zero_world"),
            (ShardedOnRankZero, "zero_one_rank"),
            (ShardedRoundRobin, "zero_unbalanced"),
            (ShardedByLocalRank, "zero_local"),
            (ShardedWithItsOwnAdamW, "zero_unmade"),
            (ShardedSteppingTheData, "zero_not_params"),
            (ShardedWithAClassList, "zero_kept"),
            (ShardedWithTheOptimizerOnTheClass, "zero_kept"),
            (ShardedWithoutBroadcast, "zero_not_shared"),
            (ShardedBroadcastingBeforeTheStep, "zero_not_shared"),
            (ShardedAveragingAgain, "zero_twice"),
            (ShardedAveragingAgainInOneBuffer, "zero_twice"),
            (ShardedDividingAgain, "zero_divided"),
            (ShardedSummingTheWeights, "zero_params"),
            (ShardedInAFlatBufferOnTheCpu, "off_device"),
            (ShardedBroadcastingItsOwnOnly, "hang"),
            (ShardedWithStepInsideInit, "zero_shape"),
        ],
        [
            ShardedGreedyInTheModelsOrder,
            ShardedInAFlatBufferPerOwner,
            ShardedSharingBySum,
            ShardedWithTheDataBroadcast,
        ],
    ),
}
