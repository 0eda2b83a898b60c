"""Note [unprunable exchange] and Note [metadata rows] (``ssmscan.distributed._comm``): every rank
runs the exchange's backward whatever the caller differentiates, and ranks whose backward passes
fall out of step raise on every rank instead of hanging.

Each world size runs as one group of gloo processes under a timeout (conftest), float64 against
the float64 reference over the whole sequence, uneven shards with one of length 1. The 3-rank
group is in the default suite; 2 and 4 ranks are ``slow``.
"""

from __future__ import annotations

import pytest

from .conftest import load_worker
from .test_selective_scan import check_case

_worker = load_worker()
CASES = [
    pytest.param(world, name, id=f"W{world}-{name}", marks=[] if world == 3 else [pytest.mark.slow])
    for world in (2, 3, 4)
    for name in _worker.suite_cases("autograd", world)
]


@pytest.mark.parametrize(("world", "name"), CASES)
def test_autograd_matches_single_process(cp_results, world: int, name: str) -> None:
    check_case(cp_results(world, "autograd"), name)


def test_autograd_cases_compare_what_they_ask_for(cp_results) -> None:
    results = cp_results(3, "autograd")
    sharded = {"du", "ddelta", "dB", "dC", "dz"}
    every = sharded | {"dA", "dD", "ddelta_bias"}
    assert set(results[2]["grad-subset-5+1+7-fp64"]["errors"]) == {"out"} | sharded
    asked = [set(res["grad-per-rank-5+1+7-fp64"]["errors"]) - {"out"} for res in results]
    assert asked == [{"du"}, {"ddelta"}, {"dB"}], asked
    retain = set(results[1]["grad-retain-5+1+7-fp64"]["errors"])
    assert {f"{k}-pass{i}" for k in every for i in (0, 1)} <= retain
    assert set(results[1]["grad-nograd-rank-5+1+7-fp64"]["errors"]) == {"out"}
    assert set(results[0]["grad-nograd-rank-5+1+7-fp64"]["errors"]) == {"out"} | sharded
    assert every | {"out", "last_state"} <= set(results[2]["grad-backward-5+1+7-fp64"]["errors"])


OUT_OF_STEP = {
    # rank 0 backpropagates a second time (retain_graph) while rank 1 starts a new call
    "backward_twice": "collectives are out of step (rank 0: the backward of "
    "ssmscan.distributed.selective_scan, rank 1: a call of ssmscan.distributed.selective_scan)",
    # two selective_scan calls backpropagated in opposite orders
    "backward_order": "the ranks are in the backward of different calls",
    # a selective_scan and a linear_scan call backpropagated in opposite orders
    "backward_functions": "collectives are out of step (rank 0: the backward of "
    "ssmscan.distributed.selective_scan, rank 1: the backward of ssmscan.distributed.linear_scan)",
}


@pytest.mark.parametrize("kind", sorted(OUT_OF_STEP))
def test_backward_out_of_step_raises_on_every_rank(cp_results, kind: str) -> None:
    for rank, res in enumerate(cp_results(2, "bad")):
        raised = res[kind]["raised"]
        assert raised is not None, f"rank {rank} did not raise"
        assert raised.startswith("RuntimeError: ssmscan.distributed."), f"rank {rank}: {raised}"
        assert OUT_OF_STEP[kind] in raised, f"rank {rank}: {raised}"
