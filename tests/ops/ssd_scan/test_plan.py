"""The CPU kernel's chunk-size planner, shape -> chunk: this table is its documentation."""

from __future__ import annotations

import pytest

from ssmscan.ops.ssd_scan.common import plan_chunk_size

# (nheads, headdim, dstate, ngroups) -> chunk size
TABLE = {
    (24, 64, 16, 1): 32,
    (48, 32, 32, 1): 32,
    (24, 64, 64, 8): 32,
    (24, 64, 128, 1): 64,
    (16, 128, 128, 1): 64,
    (8, 64, 256, 1): 128,
}


@pytest.mark.parametrize("shape", list(TABLE), ids=lambda s: "H{}-P{}-N{}-G{}".format(*s))
def test_plan_table(shape):
    assert plan_chunk_size(*shape) == TABLE[shape]
