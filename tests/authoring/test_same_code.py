"""A translated code cell: its comments and printed words change, its code does not."""

from __future__ import annotations

import pytest

from ddp_helpers.authoring.same_code import differences

ENGLISH = """%%ddp -n 2
import torch  # every rank
t = torch.ones(3) * (dist.get_rank() + 1)
dist.all_reduce(t)  # a sum, on every rank
print(f"after all_reduce: {t[0]:.1f} on rank {dist.get_rank()}")
setup("gloo")
"""


def test_comments_and_printed_words_may_be_translated_placeholders_reordered():
    japanese = (
        ENGLISH.replace("# every rank", "# 全ランクで")
        .replace("# a sum, on every rank", "# 合計が\n# 全ランクに")
        .replace(
            '"after all_reduce: {t[0]:.1f} on rank {dist.get_rank()}"',
            '"ランク {dist.get_rank()} の all_reduce 後: {t[0]:.1f}"',
        )
    )
    assert differences(ENGLISH, japanese) == []


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [
        ("torch.ones(3)", "torch.ones(4)", "line 3 differs"),
        ('setup("gloo")', 'setup("nccl")', "'nccl' replaces 'gloo'"),
        (":.1f}", ":.3f}", "'.3f' replaces '.1f'"),
        ('{dist.get_rank()}")', '{dist.get_world_size()}")', "line 5 differs"),
        ("%%ddp -n 2", "%%ddp -n 3", "first line"),
        ("dist.all_reduce(t)", "dist.all_reduce(t)\nt += 1", "differs"),
        ('"after all_reduce:', '"after the all_reduce:', "without translating it"),
    ],
)
def test_anything_else_is_named_with_its_line(old, new, said):
    found = differences(ENGLISH, ENGLISH.replace(old, new))
    assert len(found) == 1 and said in found[0], found


def test_the_solution_markers_stay_around_the_same_code():
    english = "def f():\n    # BEGIN SOLUTION\n    x = 1\n    return x\n    # END SOLUTION\n"
    assert differences(english, english.replace("    x = 1\n", "    x = 1  # 一\n")) == []
    moved = english.replace(
        "    # BEGIN SOLUTION\n    x = 1\n", "    x = 1\n    # BEGIN SOLUTION\n"
    )
    assert "solution markers" in differences(english, moved)[0]


def test_line_magics_are_code_too():
    english = "%load_ext ddp_helpers\nimport os  # the os\n"
    assert differences(english, english.replace("# the os", "# OS")) == []
    assert differences(english, english.replace("ddp_helpers", "other"))


def test_a_placeholder_that_holds_a_translated_label_keeps_its_place():
    english = "print(f\"{'torchrun':>10} {'(rank 0, rank 1)':31s} {x}\")\n"
    japanese = "print(f\"{'torchrun':>10} {'ランク 0, 1':31s} {x}\")\n"
    assert differences(english, japanese) == []
