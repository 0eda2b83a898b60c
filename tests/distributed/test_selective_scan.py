"""``ssmscan.distributed.selective_scan`` on 2 and 3 gloo processes, unequal shards included:
outputs, last states and every gradient equal the single-process ``ssmscan.selective_scan``
over the whole sequence; bad use raises the same clear error on every rank."""

from __future__ import annotations

import pytest

from ssmscan.testing import tolerance

from .conftest import load_worker

_worker = load_worker()
CASES = [
    (world, name)
    for world in (2, 3)
    for name in _worker.suite_cases("main", world)
    if name.startswith("selective-")
]


def check_case(results: list[dict], name: str) -> None:
    tol = tolerance(_worker.case_dtype(name))
    for rank, res in enumerate(results):
        case = res[name]
        assert case["raised"] is None, f"rank {rank}: {case['raised']}"
        assert case["errors"], f"rank {rank} compared nothing"
        bad = {k: e for k, e in case["errors"].items() if not e <= tol}
        assert not bad, f"rank {rank}: relative errors above {tol:.0e}: {bad}"


@pytest.mark.parametrize(("world", "name"), CASES, ids=[f"W{w}-{n}" for w, n in CASES])
def test_matches_single_process(cp_results, world: int, name: str) -> None:
    check_case(cp_results(world, "main"), name)


def test_every_gradient_is_compared(cp_results) -> None:
    results = cp_results(2, "main")
    names = set(results[0]["selective-9+8-fp32-full"]["errors"])
    expected = {"out", "last_state", "du", "ddelta", "dA", "dB", "dC", "dD", "dz"}
    assert expected | {"ddelta_bias", "dinitial_state"} <= names
    assert "dinitial_state" not in results[1]["selective-9+8-fp32-full"]["errors"]


BAD = {
    "batch": "ranks disagree on batch (u.shape[0]) (rank 0: 2, rank 1: 3)",
    "N": "ranks disagree on N (A.shape[1]) (rank 0: 4, rank 1: 8)",
    "dtype": "ranks disagree on dtype of u (rank 0: torch.float32, rank 1: torch.float64)",
    "empty": "empty shard (the shard length (u.shape[2]) = 0) on rank(s) [1]",
    "initial_state": "only rank 0 may pass one",
    "linear_empty": "empty shard (the shard length (b.shape[dim]) = 0) on rank(s) [1]",
    "linear_shape": "ranks disagree on the product of b's other dimensions (rank 0: 2, rank 1: 3)",
}


@pytest.mark.parametrize("kind", sorted(BAD))
def test_bad_use_raises_on_every_rank(cp_results, kind: str) -> None:
    for rank, res in enumerate(cp_results(2, "bad")):
        raised = res[kind]["raised"]
        assert raised is not None and raised.startswith("ValueError: ssmscan.distributed."), (
            f"rank {rank}: {raised}"
        )
        assert BAD[kind] in raised, f"rank {rank}: {raised}"


def test_invalid_arguments_on_one_rank(cp_results) -> None:
    rank0, rank1 = (res["local"]["raised"] for res in cp_results(2, "bad"))
    assert "rank(s) [1] rejected their arguments" in rank0
    assert rank1.startswith("ValueError: delta must have shape")


def test_collectives_stay_in_step_after_errors(cp_results) -> None:
    check_case(cp_results(2, "bad"), "after-errors")
