"""Exercise 5.3's answers: each makes one mistake a learner makes predicting a step's bytes, or
is right and written another way. DRAWN joins the sweep (tests/exercises/test_answers.py)
once lesson 05 is listed; until then tests/exercises/drawn/test_ex_5_3.py sweeps them."""

from __future__ import annotations

# ---------------------------------------------------------------- 5.3 predict_bytes_sent


def predict_without_the_ring_share(parameters, world_size):
    return {"ddp": 2 * 4 * parameters, "fsdp": 3 * 4 * parameters}  # whole tensor each pass


def predict_the_all_reduce_as_one_pass(parameters, world_size):
    one_pass = (world_size - 1) / world_size * 4 * parameters
    return {"ddp": one_pass, "fsdp": 1.5 * one_pass}


def predict_full_sharding_as_two_passes(parameters, world_size):
    one_pass = (world_size - 1) / world_size * 4 * parameters
    return {"ddp": 2 * one_pass, "fsdp": 2 * one_pass}  # gathered once, scattered once


def predict_in_bits(parameters, world_size):
    one_pass = (world_size - 1) / world_size * 32 * parameters  # float32: 32 of them
    return {"ddp": 2 * one_pass, "fsdp": 3 * one_pass}


def predict_in_values(parameters, world_size):
    one_pass = (world_size - 1) / world_size * parameters
    return {"ddp": 2 * one_pass, "fsdp": 3 * one_pass}


def predict_for_the_notebooks_model(parameters, world_size):
    one_pass = (world_size - 1) / world_size * 4 * 17_344  # the demo's model, read off a cell
    return {"ddp": 2 * one_pass, "fsdp": 3 * one_pass}


def predict_for_two_ranks(parameters, world_size):
    one_pass = (2 - 1) / 2 * 4 * parameters  # the notebook ran 2 ranks
    return {"ddp": 2 * one_pass, "fsdp": 3 * one_pass}


def predict_as_a_pair(parameters, world_size):
    one_pass = (world_size - 1) / world_size * 4 * parameters
    return 2 * one_pass, 3 * one_pass


def predict_full_sharding_all_reducing_its_gradients(parameters, world_size):
    one_pass = (world_size - 1) / world_size * 4 * parameters
    return {"ddp": 2 * one_pass, "fsdp": 4 * one_pass}  # two all-gathers and an all-reduce


def predict_with_fractions(parameters, world_size):
    from fractions import Fraction

    one_pass = Fraction(world_size - 1, world_size) * 4 * parameters
    return {"fsdp": one_pass * 3, "ddp": one_pass * 2}


def predict_in_whole_bytes(parameters, world_size):
    return {
        "ddp": 8 * parameters * (world_size - 1) // world_size,
        "fsdp": 12 * parameters * (world_size - 1) // world_size,
    }


def predict_collective_by_collective(parameters, world_size):
    steps = {"all_reduce": 2, "all_gather": 1, "reduce_scatter": 1}  # passes around the ring
    ddp = ["all_reduce"]
    fsdp = ["all_gather", "all_gather", "reduce_scatter"]  # forward, backward, gradients
    per_pass = 4 * parameters * (world_size - 1) / world_size
    return {
        "ddp": sum(steps[c] for c in ddp) * per_pass,
        "fsdp": sum(steps[c] for c in fsdp) * per_pass,
    }


DRAWN = {
    "5.3": (
        [
            (predict_without_the_ring_share, "traffic_no_share"),
            (predict_the_all_reduce_as_one_pass, "traffic_one_pass"),
            (predict_full_sharding_as_two_passes, "traffic_no_regather"),
            (predict_in_bits, "traffic_bits"),
            (predict_in_values, "traffic_no_float"),
            (predict_for_the_notebooks_model, "traffic_notebook_params"),
            (predict_for_two_ranks, "traffic_notebook_world"),
            (predict_as_a_pair, "traffic_shape"),
            (predict_full_sharding_all_reducing_its_gradients, "traffic_other"),
        ],
        [predict_with_fractions, predict_in_whole_bytes, predict_collective_by_collective],
    ),
}
