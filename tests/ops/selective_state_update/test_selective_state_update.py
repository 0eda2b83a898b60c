"""``selective_state_update`` (one decode step) against its float64 reference and against the
last step of the selective-scan reference; the Triton kernel under the interpreter on CPU, the op
on CPU and GPU, eager and torch.compile(fullgraph=True)."""

from __future__ import annotations

import os

import pytest
import torch

from ssmscan.ops.selective_scan.reference import selective_scan_reference
from ssmscan.ops.selective_state_update.api import selective_state_update
from ssmscan.ops.selective_state_update.reference import selective_state_update_reference
from ssmscan.testing import assert_close_to_reference, make_selective_scan_inputs


def _step_inputs(batch, dim, N, groups, dtype, device, seed=0):
    kw = make_selective_scan_inputs(
        batch,
        dim,
        1,
        N,
        groups=groups,
        dtype=dtype,
        device=device,
        has_initial_state=True,
        seed=seed,
    )
    return dict(
        state=kw["initial_state"],
        x=kw["u"][..., 0],
        dt=kw["delta"][..., 0],
        A=kw["A"],
        B=kw["B"][..., 0],
        C=kw["C"][..., 0],
        D=kw["D"],
        z=kw["z"][..., 0],
        dt_bias=kw["delta_bias"],
        dt_softplus=True,
    ), kw


def _ref64(s):
    return selective_state_update_reference(
        **{k: (v.double() if isinstance(v, torch.Tensor) else v) for k, v in s.items()}
    )


CASES = [
    pytest.param(2, 5, 4, None, id="B2-D5-N4"),
    pytest.param(1, 6, 3, 2, id="B1-D6-N3-G2"),
    pytest.param(3, 64, 16, None, id="B3-D64-N16"),
]


def test_reference_matches_one_scan_step():
    s, kw = _step_inputs(2, 5, 4, None, torch.float64, "cpu")
    out, h = _ref64(s)
    r_out, r_h = selective_scan_reference(
        kw["u"],
        kw["delta"],
        kw["A"],
        kw["B"],
        kw["C"],
        kw["D"],
        kw["z"],
        kw["delta_bias"],
        True,
        True,
        kw["initial_state"],
    )
    torch.testing.assert_close(out, r_out[..., 0])
    torch.testing.assert_close(h, r_h)


@pytest.mark.parametrize("batch,dim,N,groups", CASES)
def test_cpu_op_mutates_state(batch, dim, N, groups):
    s, _ = _step_inputs(batch, dim, N, groups, torch.float32, "cpu")
    r_out, r_h = _ref64(s)
    state = s["state"].clone()
    out = selective_state_update(**{**s, "state": state})
    assert_close_to_reference("out", out, r_out, torch.float32)
    assert_close_to_reference("state", state, r_h, torch.float32)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_cpu_compile_fullgraph(dynamic):
    s, _ = _step_inputs(2, 8, 4, None, torch.float32, "cpu")
    r_out, r_h = _ref64(s)

    def decode(state, x, dt, A, B, C, D, z, dt_bias):
        out = selective_state_update(state, x, dt, A, B, C, D, z, dt_bias, True)
        return out * 2

    state = s["state"].clone()
    args = [s[k] for k in ("x", "dt", "A", "B", "C", "D", "z", "dt_bias")]
    got = torch.compile(decode, fullgraph=True, dynamic=dynamic)(state, *args)
    assert_close_to_reference("out", got / 2, r_out, torch.float32)
    assert_close_to_reference("state", state, r_h, torch.float32)


def test_opcheck_cpu():
    s, _ = _step_inputs(2, 8, 4, 2, torch.float32, "cpu")
    args = [s[k] for k in ("state", "x", "dt", "A", "B", "C", "D", "z", "dt_bias", "dt_softplus")]
    torch.library.opcheck(
        torch.ops.ssmscan.selective_state_update.default,
        args,
        test_utils=("test_schema", "test_faketensor"),
    )


@pytest.mark.triton
@pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1",
    reason="interpreter tests need TRITON_INTERPRET=1 (no GPU)",
)
@pytest.mark.parametrize("block_p", [None, 2], ids=["planned", "block-p-2"])
@pytest.mark.parametrize("batch,dim,N,groups", CASES)
def test_triton_interpreter(batch, dim, N, groups, block_p):
    """The kernel at the planner's plan and at a smaller channel block (a plan passed in: more
    programs, each channel's states still in one program)."""
    from ssmscan.ops.selective_state_update import triton_fwd
    from ssmscan.ops.selective_state_update.plan import StateUpdatePlan

    s, _ = _step_inputs(batch, dim, N, groups, torch.float32, "cpu")
    r_out, r_h = _ref64(s)
    out = torch.full_like(s["x"], float("nan"))
    new = torch.full_like(s["state"], float("nan"))
    triton_fwd.launch(
        *[s[k] for k in ("state", "x", "dt", "A", "B", "C", "D", "z", "dt_bias", "dt_softplus")],
        out,
        new,
        plan=StateUpdatePlan(block_p, 2) if block_p else None,
    )
    assert_close_to_reference("out", out, r_out, torch.float32)
    assert_close_to_reference("state", new, r_h, torch.float32)


def test_plan_table():
    """Channels a program by head geometry: at most 2048 states a program and 128 channels."""
    from ssmscan.ops.selective_state_update.plan import plan_state_update

    table = {(64, 128): 16, (64, 16): 64, (1536, 16): 128, (5120, 16): 128, (1536, 4): 128,
             (8, 4): 8, (64, 256): 8, (80, 128): 16}  # fmt: skip
    got = {k: plan_state_update(*k).block_p for k in table}
    assert got == table
    assert {plan_state_update(*k).warps for k in table} == {4}


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("batch,dim,N,groups", CASES)
def test_gpu(batch, dim, N, groups, dtype):
    s, _ = _step_inputs(batch, dim, N, groups, dtype, "cuda")
    r_out, r_h = _ref64(s)
    state = s["state"].clone()
    torch.compiler.reset()  # one compile per case, not the recompile limit over the grid
    out = torch.compile(selective_state_update, fullgraph=True)(**{**s, "state": state})
    assert_close_to_reference("out", out, r_out, dtype)
    assert_close_to_reference("state", state, r_h, dtype)
