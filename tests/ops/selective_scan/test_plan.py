"""Which kernels the planner (``ssmscan.ops.selective_scan.plan``) picks, as tables: the tables
are the documentation of the policy. All on a fake H200 (``DeviceFacts``: 132 multiprocessors,
65536 registers each, compute capability 9.0); no GPU needed."""

from __future__ import annotations

import dataclasses
import pathlib
import re

import pytest
import torch

from ssmscan.ops.selective_scan.plan import (
    H200,
    INTERPRETED,
    DeviceFacts,
    Policy,
    device_facts,
    plan_backward,
    plan_forward,
)

FP32, BF16 = torch.float32, torch.bfloat16

# forward: (batch, dim, L, N, dtype) -> (kernel family, the real pass's kernel, segments,
# B / C rows in 16 bits). "fwd_lane": Note [selective scan forward lanes] (up to 32 padded
# states); "fwd_lane2": its real pass with two channels a thread (16 states, where its waves fill
# at least as well); "fwd_tile": the 2-D kernel (64 padded states and more). Batch 1 splits L
# into segments (a local pass, then the real pass folding the segments before it).
FORWARD_TABLE = [
    # batch, dim,  L,     N,   dtype   kernel  real pass    segments  rows16
    (8, 4096, 2048, 4, FP32, "lane", "fwd_lane", 1, False),
    (8, 4096, 2048, 4, BF16, "lane", "fwd_lane", 1, False),
    (8, 4096, 2048, 16, FP32, "lane", "fwd_lane", 1, False),
    (8, 4096, 2048, 16, BF16, "lane", "fwd_lane2", 1, True),
    (16, 1536, 1024, 16, FP32, "lane", "fwd_lane2", 1, False),
    (16, 1536, 1024, 16, BF16, "lane", "fwd_lane2", 1, False),
    (8, 4096, 2048, 24, FP32, "lane", "fwd_lane", 1, False),
    (8, 4096, 2048, 24, BF16, "lane", "fwd_lane", 1, False),
    (8, 4096, 2048, 64, FP32, "tile", "fwd_tile", 1, False),
    (8, 4096, 2048, 64, BF16, "tile", "fwd_tile", 1, False),
    (8, 4096, 2048, 128, FP32, "tile", "fwd_tile", 1, False),
    (8, 4096, 2048, 128, BF16, "tile", "fwd_tile", 1, False),
    (1, 1536, 4096, 4, FP32, "lane", "fwd_lane", 16, False),
    (1, 1536, 4096, 16, FP32, "lane", "fwd_lane2", 16, False),
    (1, 1536, 4096, 16, BF16, "lane", "fwd_lane2", 16, False),
    (1, 1536, 4095, 16, BF16, "lane", "fwd_lane2", 16, False),
    (1, 1024, 65536, 16, FP32, "lane", "fwd_lane2", 74, False),
    (1, 1024, 65536, 16, BF16, "lane", "fwd_lane2", 74, False),
    (1, 1536, 4096, 24, BF16, "lane", "fwd_lane", 16, False),
    (1, 1536, 4096, 64, FP32, "tile", "fwd_tile", 1, False),
    (1, 1024, 65536, 128, FP32, "tile", "fwd_tile", 1, False),  # 1024 warps: no split
]


@pytest.mark.parametrize(
    "batch,dim,L,N,dtype,kernel,real,nseg,rows16",
    FORWARD_TABLE,
    ids=[f"B{r[0]}-D{r[1]}-L{r[2]}-N{r[3]}-{str(r[4])[6:]}" for r in FORWARD_TABLE],
)
def test_forward_table(batch, dim, L, N, dtype, kernel, real, nseg, rows16):
    plan = plan_forward(batch, dim, L, N, 1, dtype, (dtype, dtype), True, H200)
    assert (plan.kernel, plan.real.kernel, plan.nseg, plan.bc16 is not None) == (
        kernel, real, nseg, rows16,
    )  # fmt: skip
    assert (plan.local is not None) == (nseg > 1)
    # the lane kernels' fallback (their layout check failing) is the 2-D kernel's plan
    if kernel == "lane":
        assert plan.fallback is not None and plan.fallback.kernel == "tile"
        assert plan.fallback.real.kernel == "fwd_tile" and plan.fallback.fallback is None
    else:
        assert plan.fallback is None


# backward at (8, 4096, L): (N, L, L static, inputs 16-byte aligned) -> the main kernel, its
# block (channels, warps). "lane": Note [selective scan backward lanes] (the split path with the
# lane layout, 8-channel warps); off the split path (N outside 9..16, L not a multiple of 16,
# L dynamic under torch.compile, an input not 16-byte aligned) "tile_rs": the 2-D kernel with
# dB / dC summed by a one-warp reduce-scatter over 32-channel blocks, up to 32 padded states;
# beyond, the plain "tile" kernel with the device's block (measured faster at N 64).
_LANE, _RS, _TILE = ("lane", 8, 1), ("tile_rs", 32, 1), ("tile", 64, 2)
BACKWARD_TABLE = [
    # N,  L,    static, aligned  main kernel, block
    (4, 2048, True, True, _RS),
    (4, 2047, True, True, _RS),
    (16, 2048, True, True, _LANE),
    (16, 2048, True, False, _RS),
    (16, 2048, False, True, _RS),
    (16, 2048, False, False, _RS),
    (16, 2047, True, True, _RS),
    (16, 2047, True, False, _RS),
    (16, 2047, False, True, _RS),
    (16, 2047, False, False, _RS),
    (12, 2048, True, True, _LANE),
    (12, 2040, True, True, _RS),
    (24, 2048, True, True, _RS),
    (24, 2047, False, False, _RS),
    (64, 2048, True, True, _TILE),
    (64, 2047, True, False, _TILE),
    (128, 2048, True, True, _TILE),
    (128, 2047, False, True, _TILE),
]


@pytest.mark.parametrize(
    "N,L,static,aligned,main",
    BACKWARD_TABLE,
    ids=[
        f"N{r[0]}-L{r[1]}-{'static' if r[2] else 'dynamic'}-{'aligned' if r[3] else 'misaligned'}"
        for r in BACKWARD_TABLE
    ],
)
def test_backward_table(N, L, static, aligned, main):
    plan = plan_backward(8, 4096, L, N, 1, static, aligned, H200)
    assert (plan.main, plan.block_d, plan.warps) == main
    assert plan.nseg == 1 and plan.carry is None and not plan.emulate
    if plan.main == "lane":  # its fallback: the split kernel, same blocks
        assert plan.states == "lane" and plan.fallback is not None
        assert (plan.fallback.main, plan.fallback.states) == ("split", "split")
    else:
        assert plan.states is None and plan.fallback is None
        assert plan.tile_block == (plan.block_d, plan.warps)


# backward, batch 1 (L in segments): (batch, dim, L, N, G, static) -> (main kernel, tile-start
# states, the segments' local pass, their carry, segments)
SEGMENTED_TABLE = [
    # lane: its states kernel also runs the local pass, the main kernel folds <= 16 segments
    (1, 1536, 4096, 16, 1, True, ("lane", "lane_adj", "lane", "main", 16)),
    # ... beyond 16 segments the carry kernel runs between them
    (1, 1024, 65536, 16, 1, True, ("lane", "lane_adj", "lane", "kernel", 64)),
    # off the split path: tile_rs with the 2-D local and carry passes
    (1, 1536, 4095, 16, 1, True, ("tile_rs", None, "tile", "kernel", 16)),
    (1, 1536, 4096, 16, 1, False, ("tile_rs", None, "tile", "kernel", 16)),
    (1, 1536, 4096, 64, 1, True, ("tile", None, "tile", "kernel", 16)),
    # groups of 12 channels fill neither the split kernels' 8-channel warps nor tile_rs's 32
    (1, 1536, 4096, 16, 128, True, ("tile", None, "tile", "kernel", 6)),
    # groups of 8 channels: the split path
    (1, 1536, 4096, 16, 192, True, ("lane", "lane_adj", "lane", "main", 16)),
]


@pytest.mark.parametrize(
    "batch,dim,L,N,G,static,want",
    SEGMENTED_TABLE,
    ids=[f"B{r[0]}-D{r[1]}-L{r[2]}-N{r[3]}-G{r[4]}-{'static' if r[5] else 'dynamic'}"
         for r in SEGMENTED_TABLE],
)  # fmt: skip
def test_backward_segmented_table(batch, dim, L, N, G, static, want):
    plan = plan_backward(batch, dim, L, N, G, static, True, H200)
    assert (plan.main, plan.states, plan.local, plan.carry, plan.nseg) == want


def test_tile_rs_is_planned_off_the_split_path():
    """Off the split path the backward plans the reduce-scatter (``RS``) with its one-warp,
    32-channel block; the launcher passes it on (RS 1 compiled, 2 emulated)."""
    plan = plan_backward(8, 4096, 2047, 16, 1, True, True, H200)
    assert (plan.main, plan.tile_block, plan.block_d, plan.warps) == ("tile_rs", (32, 1), 32, 1)
    # the interpreter emulates the split kernels' shuffles, so there any L takes them; N = 4
    # takes tile_rs, its shuffles emulated
    assert plan_backward(8, 4096, 2047, 16, 1, True, True, INTERPRETED).main == "lane"
    interp = plan_backward(8, 4096, 2047, 4, 1, True, True, INTERPRETED)
    assert interp.main == "tile_rs" and interp.emulate
    # a policy without the reduce-scatter (the benchmark's "before") plans the plain 2-D kernel
    # with the block the device's channels ask for
    plain = plan_backward(8, 4096, 2047, 16, 1, True, True, H200, policy=Policy(rs_max_np=0))
    assert plain.main == "tile" and plain.tile_block != (32, 1)


def test_plans_are_pure_and_cached():
    """Equal inputs give the same frozen plan object (cached); a plan cannot be changed in place;
    an experiment varies one with ``dataclasses.replace``."""
    a = plan_forward(1, 1536, 4096, 16, 1, BF16, (BF16, BF16), True, H200)
    b = plan_forward(1, 1536, 4096, 16, 1, BF16, (BF16, BF16), True, H200)
    assert a is b
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.nseg = 2  # type: ignore[misc]
    assert dataclasses.replace(a, nseg=2).nseg == 2 and a.nseg == 16
    assert plan_backward(8, 4096, 2048, 16, 1, True, True, H200) is plan_backward(
        8, 4096, 2048, 16, 1, True, True, H200
    )


def test_device_facts_steer_the_plan():
    """Device facts are inputs: a device with half the multiprocessors splits a batch-1 forward
    into fewer segments, and the interpreter plans no register caps or wave fitting."""
    half = DeviceFacts(66, 65536, (9, 0), True)
    full = plan_forward(1, 1024, 65536, 16, 1, FP32, (FP32, FP32), True, H200)
    small = plan_forward(1, 1024, 65536, 16, 1, FP32, (FP32, FP32), True, half)
    assert small.nseg < full.nseg
    assert device_facts(torch.device("cpu")) == INTERPRETED
    policy = Policy(split_below_warps=0)
    assert plan_forward(1, 1536, 4096, 16, 1, FP32, (FP32, FP32), True, H200, policy).nseg == 1


# inline PTX by the device's facts: (facts) -> the plans' ``ptx`` (every launch's ``PTX``). The
# kernels' PTX (``shfl.sync``, ``%laneid``, ``rcp.approx.ftz``, ``prefetch.global.L1``) needs a
# compiled kernel for sm_70 or later; anything else runs the portable ``tl`` code.
PTX_TABLE = [
    ("H200-sm90", H200, True),
    ("A100-sm80", DeviceFacts(108, 65536, (8, 0), True), True),
    ("V100-sm70", DeviceFacts(80, 65536, (7, 0), True), True),
    ("P100-sm60", DeviceFacts(56, 65536, (6, 0), True), False),
    ("interpreter", INTERPRETED, False),
]


@pytest.mark.parametrize("facts, ptx", [r[1:] for r in PTX_TABLE], ids=[r[0] for r in PTX_TABLE])
def test_inline_ptx_follows_the_device_capability(facts, ptx):
    """The plans carry the capability gate: every forward launch's ``PTX`` constexpr (and the
    fallback's), the backward's ``ptx`` with its shuffles emulated exactly where PTX is off; the
    launchers check the lane kernels' shuffle layouts only where PTX shuffles run."""
    from ssmscan.ops.common.launch_options import DEFAULT as LAUNCH
    from ssmscan.ops.selective_scan import triton_fwd

    for N, dtype in ((16, BF16), (16, FP32), (4, FP32), (64, FP32)):
        for batch, L in ((8, 2048), (1, 65536)):  # unsplit, segments
            fwd = plan_forward(batch, 1024, L, N, 1, dtype, (dtype, dtype), True, facts)
            for plan in (fwd, fwd.fallback):
                if plan is None:
                    continue
                assert plan.ptx is ptx
                launches = [x for x in (plan.local, plan.real) if x is not None]
                assert all(x.kw()["PTX"] is ptx for x in launches), launches
            bwd = plan_backward(batch, 1024, L, N, 1, True, True, facts)
            for plan in (bwd, bwd.fallback):
                if plan is not None:
                    assert plan.ptx is ptx and plan.emulate is (not ptx)
    assert facts.ptx is ptx
    for name in ("fwd_lane", "fwd_lane2"):
        assert (triton_fwd._kernel(name, 4, ptx, LAUNCH)._check is not None) is ptx


def test_no_global_state_in_the_kernel_layer():
    """No ``global`` statement under src/ssmscan, and the selective-scan kernel modules hold no
    mutable module-level settings (dicts or lists in UPPER case)."""
    src = pathlib.Path(__file__).parents[3] / "src" / "ssmscan"
    offenders = [
        f"{p}:{i}"
        for p in src.rglob("*.py")
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if re.match(r"\s*global\s+\w", line)
    ]
    assert not offenders, offenders
    for p in (src / "ops" / "selective_scan").glob("triton_*.py"):
        text = p.read_text()
        assert not re.search(r"^[A-Z][A-Z0-9_]*\s*(:[^=]*)?=\s*[\[{]", text, re.M), p
    # no on / off switches at module level in the op or the launch layer (policy comes in as
    # ``Policy``, ``DeviceFacts``, ``LaunchOptions``), and no Triton setting read by the kernels
    launch = [src / "ops" / "common" / f for f in ("triton_launch.py", "launch_plan.py")]
    for p in [*(src / "ops" / "selective_scan").glob("*.py"), *launch]:
        text = p.read_text()
        assert not re.search(r"^_?[A-Z][A-Z0-9_]*\s*(:[^=]*)?=\s*(True|False)\b", text, re.M), p
        assert "knobs.runtime.interpret" not in text, p
