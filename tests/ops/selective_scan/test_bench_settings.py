"""The GPU benchmark's variant settings build valid policies on any machine: its timing needs a
GPU, but a broken setting must fail here, not at the start of a lent GPU's call."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

import pytest

pytest.importorskip("triton")

BENCH = pathlib.Path(__file__).parents[3] / "benchmarks" / "selective_scan" / "bench_gpu.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("ssmscan_bench_gpu", BENCH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    try:
        spec.loader.exec_module(mod)
        yield mod
    finally:
        # the benchmark answers the launchers' plan_for for its process; restore the library's
        from ssmscan.ops.selective_scan import triton_bwd, triton_fwd

        triton_fwd.plan_for, triton_bwd.plan_for = mod._PLAN_FWD, mod._PLAN_BWD
        sys.modules.pop(spec.name, None)


@pytest.mark.parametrize(
    "bwd, fwd, target",
    [
        ("lane", "lane", -1),
        ("split-s0-w4-1ch", "tile", 4096),
        ("lane-carrykernel-rows16", "lane", 0),
        ("lane-nors", "lane", -1),
    ],
)
def test_variant_settings(bench, bwd, fwd, target):
    bench.set_variant(bwd)
    bench.set_target_warps(target)
    bench.set_fwd_variant(fwd)
    pol = bench._CHOICE["policy"]
    assert bench._CHOICE["bwd"] == bwd.split("-")[0] and bench._CHOICE["fwd"] == fwd
    assert hash(pol) == hash(type(pol)(**{f: getattr(pol, f) for f in pol.__dataclass_fields__}))
    if "s0" in bwd:
        assert pol.states_maxnreg == 0 and pol.fwd_warps == 4 and not pol.two_channels
    if target > 0:
        assert pol.split_below_warps == target
    assert (pol.rs_max_np == 0) == ("nors" in bwd)
    bench.set_variant("lane")
    bench.set_target_warps(-1)
    bench.set_fwd_variant("lane")
