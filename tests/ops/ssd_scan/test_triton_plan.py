"""The SSD Triton planner (``ssmscan.ops.ssd_scan.plan``), head geometry -> plan, as a table: the
table is the documentation of the policy. On a fake H200 (``DeviceFacts``) and under the
interpreter; no GPU needed."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest
import torch

from ssmscan.ops.ssd_scan.plan import H200, INTERPRETED, plan_ssd

FP32, BF16, FP16 = torch.float32, torch.bfloat16, torch.float16

# (nheads, headdim, ngroups, dstate, dtype, facts) -> (the backward's chunk, the dx / dt
# kernel's loop steps (headdim, dstate), precision, warps of the dx / dt and dB / dC kernels,
# emulated). 16-bit inputs run dx / dt and dB / dC at 4 warps, dx / dt with a dstate step of
# 64; float32 at 8 warps and a step of 32 (all measured).
TABLE = [
    # mamba2-130m / 2.7b / Codestral-like heads: Q 64
    ((24, 64, 1, 128, BF16, H200), (64, (32, 64), "tf32", (4, 4), False)),
    ((80, 64, 1, 128, BF16, H200), (64, (32, 64), "tf32", (4, 4), False)),
    ((128, 64, 8, 128, BF16, H200), (64, (32, 64), "tf32", (4, 4), False)),
    ((48, 64, 1, 128, FP16, H200), (64, (32, 64), "tf32", (4, 4), False)),
    # float32: 3xTF32 on the tensor cores (plain TF32 misses the float32 tolerance)
    ((24, 64, 1, 128, FP32, H200), (64, (32, 32), "tf32x3", (8, 8), False)),
    # wide heads and states: looped in steps of 32 headdim, 64 dstate
    ((16, 128, 1, 128, BF16, H200), (64, (32, 64), "tf32", (4, 4), False)),
    ((32, 256, 1, 256, BF16, H200), (64, (32, 64), "tf32", (4, 4), False)),
    # narrow: steps shrink to the padded sizes (at least 16, tl.dot's minimum), 4 warps
    ((48, 32, 1, 32, BF16, H200), (64, (32, 32), "tf32", (4, 4), False)),
    ((24, 64, 1, 16, FP32, H200), (64, (32, 16), "tf32x3", (8, 8), False)),
    # the interpreter: IEEE float32; the tensor cores' rounding emulated
    ((4, 4, 2, 8, FP32, INTERPRETED), (64, (16, 16), "ieee", (4, 4), True)),
    ((4, 4, 2, 8, BF16, INTERPRETED), (64, (16, 16), "tf32", (4, 4), True)),
]


def _id(row):
    (h, p, g, n, dtype, facts), _ = row
    return f"H{h}-P{p}-G{g}-N{n}-{str(dtype)[6:]}-{'H200' if facts.compiled else 'interp'}"


@pytest.mark.parametrize("shape,expected", TABLE, ids=[_id(r) for r in TABLE])
def test_plan_table(shape, expected):
    p = plan_ssd(*shape)
    got = (p.chunk, (p.block_p, p.block_n), p.precision, (p.warps_dx, p.warps_dbc), p.emulate)
    assert got == expected


def test_backward_operands_in_16_bit_for_16_bit_inputs():
    """The backward's walks, dx / dt and dB / dC kernels round their matmul operands to x's
    dtype for 16-bit inputs (as mamba-ssm's backward does; their float32 sums keep dA and d(dt)
    within the bf16 tolerance), and keep float32 operands for float32 inputs."""
    for shape in ((24, 64, 1, 128, BF16, H200), (48, 64, 1, 128, FP16, H200),
                  (4, 4, 2, 8, BF16, INTERPRETED)):  # fmt: skip
        p = plan_ssd(*shape)
        assert (p.walks_f32_dot, p.dx_f32_dot, p.dbc_f32_dot) == (False, False, False), shape
    p = plan_ssd(24, 64, 1, 128, FP32, H200)
    assert (p.walks_f32_dot, p.dx_f32_dot, p.dbc_f32_dot) == (True, True, True)


def test_da_by_row_and_column_sums_for_16_bit_inputs_only():
    """da's decay-matrix term by row and column sums (a difference of sums, about 3e-4 of dA at
    strong decays) for 16-bit inputs; float32 inputs keep the tile's cumsum (their 1e-5
    tolerance)."""
    for dtype in (BF16, FP16):
        assert plan_ssd(24, 64, 1, 128, dtype, H200).da_sums
    assert not plan_ssd(24, 64, 1, 128, FP32, H200).da_sums
    assert not plan_ssd(4, 4, 2, 8, FP32, INTERPRETED).da_sums


def test_backward_states_in_16_bit_for_16_bit_inputs():
    """The walking backward stores its states and their gradients in x's dtype for 16-bit
    inputs (as mamba-ssm's backward does), in float32 for float32 inputs."""
    assert plan_ssd(24, 64, 1, 128, BF16, H200).bwd_states_16
    assert plan_ssd(48, 64, 1, 128, FP16, H200).bwd_states_16
    assert plan_ssd(4, 4, 2, 8, BF16, INTERPRETED).bwd_states_16
    assert not plan_ssd(24, 64, 1, 128, FP32, H200).bwd_states_16
    assert not plan_ssd(24, 64, 1, 128, FP32, H200, "high").bwd_states_16


def test_plan_float32_precision_follows_the_caller():
    """float32: 3xTF32 at PyTorch's default "highest" float32 matmul precision, plain TF32 where
    the caller allows it ("high" / "medium"), IEEE where there are no tensor cores; 16-bit
    inputs are not affected; an unknown word is refused by name."""
    assert plan_ssd(24, 64, 1, 128, FP32, H200).precision == "tf32x3"
    assert plan_ssd(24, 64, 1, 128, FP32, H200, "high").precision == "tf32"
    assert plan_ssd(24, 64, 1, 128, FP32, H200, "medium").precision == "tf32"
    assert plan_ssd(4, 4, 2, 8, FP32, INTERPRETED, "high").precision == "ieee"
    assert plan_ssd(24, 64, 1, 128, BF16, H200, "high") is plan_ssd(24, 64, 1, 128, BF16, H200)
    with pytest.raises(ValueError, match=r"matmul_precision.*'low'"):
        plan_ssd(24, 64, 1, 128, FP32, H200, "low")


def test_plan_is_cached_frozen_and_replaceable():
    """The same plan object for the same call; frozen; an experiment's variation through
    ``dataclasses.replace`` leaves the planner's untouched."""
    p = plan_ssd(24, 64, 1, 128, BF16, H200)
    assert plan_ssd(24, 64, 1, 128, BF16, H200) is p
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.chunk = 32  # type: ignore[misc]
    q = dataclasses.replace(p, chunk=32)
    assert q.chunk == 32 and plan_ssd(24, 64, 1, 128, BF16, H200).chunk == 64


# (nheads, headdim, dstate, facts) -> the dstates walk's (headdim block, dstate block, warps):
# the same in every dtype (its state's gradient float32 on chip); the walks run at every size
# (Note [SSD Triton walking backward])
WALK_TABLE = [
    ((80, 64, 128, H200), (64, 64, 4)),  # mamba2-2.7b
    ((24, 64, 128, H200), (64, 64, 4)),  # mamba2-130m
    ((48, 128, 256, H200), (64, 64, 4)),
    ((8, 32, 16, H200), (32, 16, 4)),
    ((1, 4, 8, INTERPRETED), (16, 16, 4)),
]


@pytest.mark.parametrize("shape,expected", WALK_TABLE, ids=[str(r[0][:3]) for r in WALK_TABLE])
def test_walk_table(shape, expected):
    h, p, n, facts = shape
    for dtype in (BF16, FP16, FP32):
        plan = plan_ssd(h, p, 1, n, dtype, facts)
        assert (plan.walk_block_p, plan.walk_block_n, plan.warps_walk) == expected, dtype


# (nheads, headdim, ngroups, dstate, dtype) -> the backward's dB / dC kernel: (heads a program,
# headdim step, dstate block, operands follow f32_dot): 16-bit inputs take the whole dstate up
# to 128 (g·Xᵀ once a head) with operands in x's dtype, float32 (3xTF32, spilling already)
# blocks of 32
DBC_TABLE = [
    ((80, 64, 1, 128, BF16), (8, 32, 128, False)),
    ((128, 64, 8, 128, BF16), (8, 32, 128, False)),
    ((32, 256, 1, 256, FP16), (8, 32, 128, False)),
    ((24, 64, 1, 128, FP32), (8, 32, 32, True)),
    ((48, 32, 1, 16, BF16), (8, 32, 16, False)),
]


@pytest.mark.parametrize("shape,expected", DBC_TABLE, ids=[str(r[0]) for r in DBC_TABLE])
def test_dbc_table(shape, expected):
    p = plan_ssd(*shape, H200)
    assert (p.dbc_heads, p.dbc_block_p, p.dbc_block_n, p.dbc_f32_dot) == expected


# (nheads, headdim, dstate, dtype, facts) -> the forward (Note [SSD Triton forward]): (chunk,
# states tile, its warps and stages, 16-bit states, float32 operands, output tile (headdim block,
# dstate step), its warps). float32 keeps float32 states: fwd_states_16 applies to 16-bit inputs;
# and (64, 64) states tiles, where 16-bit inputs take the whole dstate up to 128.
FORWARD_TABLE = [
    ((80, 64, 128, BF16, H200), (64, (64, 128), 4, 2, True, False, (64, 64), 4)),
    ((24, 64, 128, FP16, H200), (64, (64, 128), 4, 2, True, False, (64, 64), 4)),
    ((32, 128, 256, BF16, H200), (64, (64, 128), 4, 2, True, False, (64, 64), 4)),
    ((48, 32, 16, BF16, H200), (64, (32, 16), 4, 2, True, False, (32, 16), 4)),
    ((24, 64, 128, FP32, H200), (64, (64, 64), 4, 2, True, False, (64, 64), 4)),
    ((4, 4, 8, BF16, INTERPRETED), (64, (16, 16), 4, 2, True, False, (16, 16), 4)),
]


@pytest.mark.parametrize("shape,expected", FORWARD_TABLE,
                         ids=[str(r[0][:4]) for r in FORWARD_TABLE])  # fmt: skip
def test_forward_table(shape, expected):
    h, p, n, dtype, facts = shape
    q = plan_ssd(h, p, 1, n, dtype, facts)
    got = (q.fwd_chunk, (q.states_walk_block_p, q.states_walk_block_n),
           q.warps_states_walk, q.states_walk_stages, q.fwd_states_16, q.fwd_f32_dot,
           (q.out_block_p, q.out_block_n), q.warps_out)  # fmt: skip
    assert got == expected


@pytest.mark.slow
def test_kernels_compile_for_sm90():
    """Every SSD kernel at the planner's H200 plan, each dtype and flag combination, through the
    real compiler for sm_90 (``sm90_compile_check.py`` in a process without TRITON_INTERPRET: the
    interpreter accepts code the compiler rejects), with float scalars typed float64 as Inductor
    types them under torch.compile."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    script = os.path.join(os.path.dirname(__file__), "sm90_compile_check.py")
    res = subprocess.run(
        [sys.executable, script], env=env, capture_output=True, text=True, timeout=900
    )
    assert res.returncode == 0, res.stdout + res.stderr[-3000:]
    assert res.stdout.count(": ok, regs") >= 44, res.stdout
