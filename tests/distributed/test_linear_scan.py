"""``ssmscan.distributed.linear_scan`` (both directions, time dimension inner or outer) and
``prefix_halo`` on 2 and 3 gloo processes, unequal shards included, against the single-process
results over the whole sequence."""

from __future__ import annotations

import pytest

from .conftest import load_worker
from .test_selective_scan import check_case

_worker = load_worker()
CASES = [
    (world, name)
    for world in (2, 3)
    for name in _worker.suite_cases("main", world)
    if name.startswith(("linear-", "halo-"))
]


@pytest.mark.parametrize(("world", "name"), CASES, ids=[f"W{w}-{n}" for w, n in CASES])
def test_matches_single_process(cp_results, world: int, name: str) -> None:
    check_case(cp_results(world, "main"), name)
