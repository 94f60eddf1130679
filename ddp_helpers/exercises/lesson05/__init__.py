"""Exercises of lesson 05, sharding the memory (`from ddp_helpers.exercises import lesson05`).

Not yet a lesson: LESSONS in exercises/__init__.py lists it once its notebooks exist. One
module per exercise; common holds the model and batches the cells and checks share."""

from __future__ import annotations

from .checkpoint import q4 as q4
from .common import make_batches as make_batches
from .common import make_model as make_model
from .common import my_rows as my_rows
from .fsdp import q3 as q3
from .resume import q5 as q5
