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

# (nheads, headdim, ngroups, dstate, dtype, facts) -> (chunk, state tile, out block, loop
# blocks (headdim, dstate), pass block, precision, warps of the state / out / pass / dx / dbc
# kernels, emulated). 16-bit inputs pass in blocks of 512 (they pass only where too few
# programs walk) and run dx / dt and dB / dC at 4 warps, dx / dt with a dstate step of 64;
# float32 in 1024, at 8 warps and a step of 32 (all measured).
TABLE = [
    # mamba2-130m / 2.7b / Codestral-like heads: Q 64, (64, 128) chunk-state tiles
    (
        (24, 64, 1, 128, BF16, H200),
        (64, (64, 128), 64, (32, 64), 512, "tf32", (8, 8, 4, 4, 4), False),
    ),
    (
        (80, 64, 1, 128, BF16, H200),
        (64, (64, 128), 64, (32, 64), 512, "tf32", (8, 8, 4, 4, 4), False),
    ),
    (
        (128, 64, 8, 128, BF16, H200),
        (64, (64, 128), 64, (32, 64), 512, "tf32", (8, 8, 4, 4, 4), False),
    ),
    (
        (48, 64, 1, 128, FP16, H200),
        (64, (64, 128), 64, (32, 64), 512, "tf32", (8, 8, 4, 4, 4), False),
    ),
    # float32: 3xTF32 on the tensor cores (plain TF32 misses the float32 tolerance)
    (
        (24, 64, 1, 128, FP32, H200),
        (64, (64, 128), 64, (32, 32), 1024, "tf32x3", (8, 8, 4, 8, 8), False),
    ),
    # wide heads and states: blocks of 64 headdim, 128 dstate, looped
    (
        (16, 128, 1, 128, BF16, H200),
        (64, (64, 128), 64, (32, 64), 512, "tf32", (8, 8, 4, 4, 4), False),
    ),
    (
        (32, 256, 1, 256, BF16, H200),
        (64, (64, 128), 64, (32, 64), 512, "tf32", (8, 8, 4, 4, 4), False),
    ),
    # narrow: blocks shrink to the padded sizes (at least 16, tl.dot's minimum), 4 warps
    (
        (48, 32, 1, 32, BF16, H200),
        (64, (32, 32), 32, (32, 32), 512, "tf32", (4, 4, 4, 4, 4), False),
    ),
    (
        (24, 64, 1, 16, FP32, H200),
        (64, (64, 16), 64, (32, 16), 1024, "tf32x3", (4, 8, 4, 8, 8), False),
    ),
    # the interpreter: IEEE float32; the tensor cores' rounding emulated
    (
        (4, 4, 2, 8, FP32, INTERPRETED),
        (64, (16, 16), 16, (16, 16), 32, "ieee", (4, 4, 4, 4, 4), True),
    ),
    (
        (4, 4, 2, 8, BF16, INTERPRETED),
        (64, (16, 16), 16, (16, 16), 32, "tf32", (4, 4, 4, 4, 4), True),
    ),
]


def _id(row):
    (h, p, g, n, dtype, facts), _ = row
    return f"H{h}-P{p}-G{g}-N{n}-{str(dtype)[6:]}-{'H200' if facts.compiled else 'interp'}"


@pytest.mark.parametrize("shape,expected", TABLE, ids=[_id(r) for r in TABLE])
def test_plan_table(shape, expected):
    p = plan_ssd(*shape)
    got = (p.chunk, (p.state_block_p, p.state_block_n), p.out_block_p, (p.block_p, p.block_n),
           p.pass_block, p.precision,
           (p.warps_state, p.warps_out, p.warps_pass, p.warps_dx, p.warps_dbc), p.emulate)  # fmt: skip
    assert got == expected


def test_backward_operands_in_16_bit_for_16_bit_inputs():
    """The backward's dx / dt and dB / dC kernels round their matmul operands to x's dtype for
    16-bit inputs (as mamba-ssm's backward does; their float32 sums keep dA and d(dt) within the
    bf16 tolerance), and keep float32 operands for float32 inputs; the walks keep ``f32_dot``."""
    for shape in ((24, 64, 1, 128, BF16, H200), (48, 64, 1, 128, FP16, H200),
                  (4, 4, 2, 8, BF16, INTERPRETED)):  # fmt: skip
        p = plan_ssd(*shape)
        assert (p.f32_dot, p.dx_f32_dot, p.dbc_f32_dot) == (True, False, False), shape
    p = plan_ssd(24, 64, 1, 128, FP32, H200)
    assert (p.dx_f32_dot, p.dbc_f32_dot) == (True, True)


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


# (batch, L, nheads, headdim, dstate, facts) -> (walks, the dstates walk's headdim block,
# dstate block, warps): the backward walks (its states and their gradients, the state on chip)
# at every size and in every dtype, one sequence of few heads included; the three launches'
# states and passing stay for experiments (``walk_min_programs``), and under the interpreter both
# are tested.
WALK_TABLE = [
    ((8, 2048, 80, 64, 128, H200), (True, 64, 64, 4)),  # mamba2-2.7b
    ((16, 2048, 24, 64, 128, H200), (True, 64, 64, 4)),  # mamba2-130m
    ((2, 4096, 128, 64, 128, H200), (True, 64, 64, 4)),  # Codestral-like
    ((1, 2048, 48, 64, 128, H200), (True, 64, 64, 4)),  # 48 programs, 32 chunks
    ((1, 8191, 48, 64, 128, H200), (True, 64, 64, 4)),
    ((1, 65536, 48, 64, 128, H200), (True, 64, 64, 4)),  # one long sequence
    ((1, 1, 1, 64, 128, H200), (True, 64, 64, 4)),  # one step of one head
    ((2, 512, 48, 128, 256, H200), (True, 64, 64, 4)),
    ((4, 2048, 8, 32, 16, H200), (True, 32, 16, 4)),
    ((1, 1, 1, 4, 8, INTERPRETED), (True, 16, 16, 4)),
]


@pytest.mark.parametrize("shape,expected", WALK_TABLE, ids=[str(r[0][:5]) for r in WALK_TABLE])
def test_walk_table(shape, expected):
    from ssmscan.ops.ssd_scan.triton_walk import walks

    batch, length, h, p, n, facts = shape
    plan = plan_ssd(h, p, 1, n, BF16, facts)
    fp32 = plan_ssd(h, p, 1, n, FP32, facts)
    assert walks(batch, h, p, length, fp32) == walks(batch, h, p, length, plan)
    got = (walks(batch, h, p, length, plan), plan.walk_block_p, plan.walk_block_n, plan.warps_walk)
    assert got == expected


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


@pytest.mark.parametrize("nheads,expected", [(80, True), (60, False)])
def test_walks_with_a_symbolic_batch_and_length(nheads, expected):
    """torch.compile with dynamic sizes, under a rule that walks only where batch x heads fill
    132 multiprocessors or the sequence has 128 chunks (an experiment's plan; the planner walks
    at every size): the walk is taken only where every batch the symbol stands for (sizes >= 2)
    fills the device, or every length is long, decided without a guard on either."""
    from torch._dynamo.source import ConstantSource
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    from ssmscan.ops.ssd_scan.triton_walk import walks

    env = ShapeEnv()
    batch = env.create_symintnode(env.create_symbol(4, ConstantSource("batch")), hint=4)
    length = env.create_symintnode(env.create_symbol(9000, ConstantSource("L")), hint=9000)
    planned = plan_ssd(nheads, 64, 1, 128, BF16, H200)
    assert walks(batch, nheads, 64, length, planned)  # the planner's: always, without a guard
    plan = dataclasses.replace(planned, walk_min_programs=132, walk_min_chunks=128)
    assert walks(batch, nheads, 64, 2048, plan) is expected  # 2 x 80 >= 132 > 2 x 60
    assert walks(4, nheads, 64, 2048, plan)  # a concrete batch of 4 fills it either way
    assert walks(batch, nheads, 64, length, plan) is expected  # L >= 2 only: not long
    assert walks(1, 60, 64, 8192, plan) and not walks(1, 60, 64, 8191, plan)
    assert not env.guards


# (nheads, headdim, dstate, dtype, facts) -> the split forward (Note [SSD Triton split forward]):
# (on, chunk, states tile, its warps and stages, 16-bit states, float32 operands, output tile
# (headdim block, dstate step), its warps). Every dtype splits at every batch (float32 keeps
# float32 states: split_states_16 applies to 16-bit inputs).
SPLIT_TABLE = [
    ((80, 64, 128, BF16, H200), (True, 64, (64, 64), 4, 2, True, False, (64, 64), 4)),
    ((24, 64, 128, FP16, H200), (True, 64, (64, 64), 4, 2, True, False, (64, 64), 4)),
    ((32, 128, 256, BF16, H200), (True, 64, (64, 64), 4, 2, True, False, (64, 64), 4)),
    ((48, 32, 16, BF16, H200), (True, 64, (32, 16), 4, 2, True, False, (32, 16), 4)),
    ((24, 64, 128, FP32, H200), (True, 64, (64, 64), 4, 2, True, False, (64, 64), 4)),
    ((4, 4, 8, BF16, INTERPRETED), (True, 64, (16, 16), 4, 2, True, False, (16, 16), 4)),
]


@pytest.mark.parametrize("shape,expected", SPLIT_TABLE, ids=[str(r[0][:4]) for r in SPLIT_TABLE])
def test_split_table(shape, expected):
    h, p, n, dtype, facts = shape
    q = plan_ssd(h, p, 1, n, dtype, facts)
    got = (q.split, q.split_chunk, (q.states_walk_block_p, q.states_walk_block_n),
           q.warps_states_walk, q.states_walk_stages, q.split_states_16, q.split_f32_dot,
           (q.split_out_block_p, q.split_out_block_n), q.warps_split_out)  # fmt: skip
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
    assert res.stdout.count(": ok, regs") >= 60, res.stdout
