"""Exercises of lesson 05, sharding the memory (`from ddp_helpers.exercises import lesson05`).

Not yet a lesson: LESSONS in exercises/__init__.py lists it once its notebooks exist. One
module per exercise; common holds the model and batches the cells and checks share."""

from __future__ import annotations

from .checkpoint import q4 as q4
from .common import make_batches as make_batches
from .common import make_model as make_model
from .common import my_rows as my_rows
from .zero import q1 as q1  # exercise 5.1, ZeRO-1 by hand: ShardedOptimizer
from .traffic import q2 as q2  # exercise 5.2, the bytes a step sends: predict_bytes_sent
from .fsdp import q3 as q3
from .resume import q5 as q5
