"""Exercise 3.5's answers of issue 49: each holds only for powers of two or for the notebook's
model, or is right and written another way. DRAWN joins the sweep
(tests/exercises/test_answers.py)."""

from __future__ import annotations

import math

# ---------------------------------------------------------------- 3.5 bytes_sent


def bytes_by_halving_and_doubling(params, world_size):
    rounds = int(math.log2(world_size))  # halve the tensor each round, then double back
    return 2 * 4 * params * sum(0.5**k for k in range(1, rounds + 1))


def bytes_from_a_table_of_fractions(params, world_size):
    share = {1: 0.0, 2: 1.0, 4: 1.5, 8: 1.75}.get(world_size, 2.0)  # 2 x (1 - 1/N)
    return share * 4 * params


def bytes_for_the_lessons_model(params, world_size):
    return 2 * (world_size - 1) / world_size * 4 * 1_059_841  # the wide model's parameters


def bytes_from_a_table_without_a_default(params, world_size):
    return {1: 0, 2: 4, 4: 6, 8: 7}[world_size] * params


def bytes_through_log2(params, world_size):
    return 2 * 4 * params * (1 - 2 ** -math.log2(world_size))


def bytes_of_whole_chunks(params, world_size):
    chunks = [params // world_size + (i < params % world_size) for i in range(world_size)]
    return 2 * 4 * (params - chunks[0])  # every chunk but its own, in each pass


DRAWN = {
    "3.5": (
        [
            (bytes_by_halving_and_doubling, "bytes_powers_of_two"),
            (bytes_from_a_table_of_fractions, "bytes_powers_of_two"),
            (bytes_for_the_lessons_model, "bytes_other"),
        ],
        [bytes_through_log2, bytes_of_whole_chunks],
    ),
}
