"""The SSD Triton kernels against the float64 reference: outputs, final states and every
gradient.

``triton`` tests call the launchers (``triton_fwd.launch``, ``triton_bwd.launch``) directly on
CPU tensors under TRITON_INTERPRET=1 (set by the root conftest without a GPU), outputs from
``shapes.empty_*_outputs`` NaN-poisoned; ``gpu`` tests run the public ops on CUDA, eager and
under ``torch.compile(fullgraph=True)``.
"""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch

from ssmscan.ops.ssd_scan.common import state_dtype
from ssmscan.ops.ssd_scan.plan import plan_for
from ssmscan.ops.ssd_scan.reference import ssd_scan_reference
from ssmscan.ops.ssd_scan.shapes import empty_backward_outputs, empty_forward_outputs
from ssmscan.testing import assert_close_to_reference

pytest.importorskip("triton")

ARGS = ("x", "dt", "A", "B", "C", "D", "z", "dt_bias", "initial_states", "seq_idx")
GRADS = ("x", "dt", "A", "B", "C", "D", "z", "dt_bias", "initial_states")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
INF = float("inf")

_INTERP = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1",
    reason="interpreter tests need TRITON_INTERPRET=1 (set by the conftest without a GPU)",
)
_CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _poison(ts):
    for t in ts:
        t.fill_(float("nan"))


def _dout_dfinal(kw, seed, dfinal_given):
    g = torch.Generator().manual_seed(seed + 1)
    x = kw["x"]
    batch, _, nheads, headdim = x.shape
    dout = torch.randn(x.shape, generator=g, dtype=torch.float64).to(x.dtype)
    dfinal = torch.randn(batch, nheads, headdim, kw["B"].shape[3], generator=g,
                         dtype=torch.float64).float()  # fmt: skip
    return dout, dfinal if dfinal_given else None


def _reference(kw, dt_limit, dout, dfinal, device="cpu"):
    """float64 outputs, final states and the gradient of every tensor input, computed on
    ``device`` (the GPU tests' long lengths take the step-by-step oracle minutes on the CPU)."""
    ins = {k: (v.detach().to(device, torch.float64).requires_grad_() if isinstance(v, torch.Tensor)
               and v.is_floating_point() else v.to(device) if isinstance(v, torch.Tensor) else v)
           for k, v in kw.items()}  # fmt: skip
    out, final = ssd_scan_reference(**ins, dt_limit=dt_limit, return_final_states=True)
    leaves = [k for k in GRADS if ins.get(k) is not None]
    outs, grads_in = [out], [dout.to(device, torch.float64)]
    if dfinal is not None:
        outs.append(final)
        grads_in.append(dfinal.to(device, torch.float64))
    grads = torch.autograd.grad(outs, [ins[k] for k in leaves], grads_in)
    return out, final, dict(zip(leaves, grads))


def _run_launchers(kw, dt_limit, dout, dfinal, plan):
    from ssmscan.ops.ssd_scan import triton_bwd, triton_fwd

    args = [kw.get(k) for k in ARGS]
    opts = (kw["dt_softplus"], float(dt_limit[0]), float(dt_limit[1]))
    out, final = empty_forward_outputs(kw["x"], kw["B"])
    _poison([out, final])
    triton_fwd.launch(*args, *opts, out, final, plan=plan)
    dx, ddt, dA, dB, dC, optional = empty_backward_outputs(*args[:9])
    _poison([dx, ddt, dA, dB, dC, *optional])
    triton_bwd.launch(dout, dfinal, *args, *opts, dx, ddt, dA, dB, dC, optional, plan=plan)
    names = ["x", "dt", "A", "B", "C"] + [
        k for k in ("D", "z", "dt_bias", "initial_states") if kw.get(k) is not None
    ]
    return out, final, dict(zip(names, [dx, ddt, dA, dB, dC, *optional]))


def _assert_matches(out, final, grads, reference, dtype):
    """Output, final state and every gradient against the float64 ``reference`` (``_reference``'s
    triple) at ``dtype``'s tolerance."""
    r_out, r_final, r_grads = reference
    assert_close_to_reference("out", out, r_out, dtype)
    assert_close_to_reference("final_states", final, r_final, dtype)
    assert set(grads) == set(r_grads)
    for k, g in grads.items():
        assert_close_to_reference(f"d{k}", g, r_grads[k], dtype)


def _check(kw, dt_limit, dfinal_given, plan, dtype, seed):
    """Forward and backward against float64 by ``plan`` and by its other settings (for 16-bit
    inputs also with the backward's states stored in the other dtype than planned); then the
    forward at small state tiles."""
    dout, dfinal = _dout_dfinal(kw, seed, dfinal_given)
    r_out, r_final, r_grads = _reference(kw, dt_limit, dout, dfinal)
    plans = {"planned": plan}
    if plan is not None:
        # the forward at the backward's chunk; the dB / dC kernel two heads a program (partial
        # sums over a group's splits); C Bᵀ (once per group or once per head) and the dx / dt
        # and dB / dC kernels' and the walks' operand dtypes the other way than planned; da's
        # decay-matrix term by the tile's cumsum
        plans["other settings"] = dataclasses.replace(
            plan, fwd_chunk=plan.chunk, dbc_heads=2, cb_once=not plan.cb_once,
            dbc_f32_dot=not plan.dbc_f32_dot, dx_f32_dot=not plan.dx_f32_dot,
            walks_f32_dot=not plan.walks_f32_dot,
            da_sums=False,  # the tile's cumsum, which 16-bit inputs do not plan
        )  # fmt: skip
        if dtype != torch.float32:  # the backward's states the other way than planned
            plans["other states"] = dataclasses.replace(
                plans["other settings"], bwd_states_16=not plan.bwd_states_16
            )
    for family, p in plans.items():
        out, final, grads = _run_launchers(kw, dt_limit, dout, dfinal, p)
        assert out.dtype == kw["x"].dtype and final.dtype == state_dtype(kw["x"].dtype)
        assert_close_to_reference(f"out ({family})", out, r_out, dtype)
        assert_close_to_reference(f"final_states ({family})", final, r_final, dtype)
        assert set(grads) == set(r_grads)
        for k, g in grads.items():
            assert g.dtype == kw[k].dtype and g.shape == kw[k].shape, k
            assert_close_to_reference(f"d{k} ({family})", g, r_grads[k], dtype)
    if plan is not None:
        _check_forward_tiles(kw, dt_limit, plan, dtype, r_out, r_final)


def _check_forward_tiles(kw, dt_limit, plan, dtype, r_out, r_final):
    """The forward (the states walk, then the chunk-parallel output kernel; operands in x's
    dtype and states stored in it for 16-bit inputs) at the backward's chunk, in 16 x 16 state
    tiles (several of them wherever headdim or dstate exceeds 16)."""
    from ssmscan.ops.ssd_scan import triton_fwd

    p = dataclasses.replace(plan, fwd_chunk=plan.chunk, states_walk_block_p=16,
                            states_walk_block_n=16, out_block_p=16, out_block_n=16)  # fmt: skip
    args = [kw.get(k) for k in ARGS]
    out, final = empty_forward_outputs(kw["x"], kw["B"])
    _poison([out, final])
    triton_fwd.launch(*args, kw["dt_softplus"], float(dt_limit[0]), float(dt_limit[1]), out,
                      final, plan=p)  # fmt: skip
    assert_close_to_reference("out (forward tiles)", out, r_out, dtype)
    assert_close_to_reference("final_states (forward tiles)", final, r_final, dtype)


# (L, ngroups, options, dt_limit, dfinal given, chunk: None = the planner's (64))
FULL = dict(D_shape="channel", z=True, dt_bias=True, dt_softplus=True, initial_states=True,
            seq_idx=True)  # fmt: skip
CASES = [
    pytest.param(1, 1, dict(), (0.0, INF), True, None, id="L1-G1-Dhead"),
    pytest.param(63, 2, FULL, (0.0, INF), True, None, id="L63-G2-full"),
    pytest.param(
        64,
        1,
        dict(z=True, dt_softplus=True, initial_states=True),
        (0.005, 0.05),
        False,
        None,
        id="L64-G1-z-limit-nodfinal",
    ),
    pytest.param(
        65,
        2,
        dict(D_shape="channel", dt_bias=True, seq_idx=True),
        (0.0, INF),
        True,
        None,
        id="L65-G2-Dchan-bias-packed",
    ),
    pytest.param(47, 2, FULL, (0.002, 0.08), True, 16, id="L47-G2-full-limit-Q16"),
]


@pytest.mark.triton
@_INTERP
@pytest.mark.parametrize("L,ngroups,opts,dt_limit,dfinal_given,chunk", CASES)
def test_triton_interpreter(L, ngroups, opts, dt_limit, dfinal_given, chunk, ssd_inputs):
    """Odd lengths, one step, and the chunk boundary (63, 64, 65 with the planner's chunk of
    64); several chunks with packed sequences crossing them (Q = 16)."""
    kw = ssd_inputs(batch=2, L=L, nheads=4, headdim=4, ngroups=ngroups, dstate=8, seed=L, **opts)
    plan = plan_for(kw["x"], kw["B"])
    assert plan.chunk == 64  # what the boundary cases are about
    if chunk is not None:
        plan = dataclasses.replace(plan, chunk=chunk)
    _check(kw, dt_limit, dfinal_given, plan, torch.float32, L)


@pytest.mark.triton
@_INTERP
@pytest.mark.parametrize(
    "bc", ["x", pytest.param("fp32", marks=pytest.mark.slow)], ids=["BC-x-dtype", "BC-fp32"]
)
@pytest.mark.parametrize("dt", ["bf16", "fp16"])
def test_triton_interpreter_16bit(dt, bc, ssd_inputs):
    """16-bit x, B, C, z, dt (the matmuls' operands in that dtype, float32 accumulation) with
    float32 parameters and states; B and C also in float32 (the state dtype), which the
    backward's 16-bit states do not multiply as they are."""
    kw = ssd_inputs(batch=1, L=37, nheads=4, headdim=16, ngroups=2, dstate=16,
                    dtype=DTYPES[dt], seed=5, **FULL)  # fmt: skip
    if bc == "fp32":
        kw.update(B=kw["B"].float(), C=kw["C"].float())
    plan = dataclasses.replace(plan_for(kw["x"], kw["B"]), chunk=16)
    _check(kw, (0.0, INF), True, plan, DTYPES[dt], 37)


@pytest.mark.triton
@_INTERP
@pytest.mark.parametrize("seq_idx", [True, False], ids=["seq_idx", "one-sequence"])
def test_triton_interpreter_blocks(ssd_inputs, seq_idx):
    """headdim and dstate over several blocks (the loops over headdim and dstate blocks, partial
    last blocks, the walks' state tiles and their partial sums of the carries' gradients), 3
    heads a group; with one sequence every chunk's carry enters the gradients."""
    kw = ssd_inputs(batch=1, L=21, nheads=3, headdim=24, ngroups=1, dstate=40, seed=3,
                    **dict(FULL, seq_idx=seq_idx))  # fmt: skip
    plan = dataclasses.replace(plan_for(kw["x"], kw["B"]), chunk=16, fwd_chunk=16,
                               out_block_p=16, out_block_n=16, block_p=16, block_n=16,
                               walk_block_p=16, walk_block_n=16,
                               states_walk_block_p=16, states_walk_block_n=16)  # fmt: skip
    _check(kw, (0.0, INF), True, plan, torch.float32, 21)


@pytest.mark.triton
@_INTERP
@pytest.mark.parametrize(
    "min_chunks,packed,dt",
    [(1, True, "fp32"), (3, True, "fp32"), (3, False, "fp32"), (2, True, "bf16")],
    ids=[
        "parts-of-1",
        "parts-of-4-3-packed",
        "parts-of-4-3-no-initial-or-dfinal",
        "parts-of-3-3-1-bf16",
    ],
)
def test_triton_interpreter_split_walks(min_chunks, packed, dt, ssd_inputs):
    """Every walk split into parts of at least ``min_chunks`` chunks (``walk_parts``: the last
    one shorter), their ends passed from part to part (Note [SSD split walks]): 7 chunks of 16
    for the backward, 2 of 64 for the forward. Packed: sequences change at the first step of a
    part (t = 48: chunk 3, t = 64: chunk 4), inside a chunk (t = 53) and inside a part (t = 90);
    unpacked: the passes start from zero (no initial state, no gradient of the final state)."""
    kw = ssd_inputs(batch=2, L=100, nheads=3, headdim=16, ngroups=1, dstate=32,
                    dtype=DTYPES[dt], seed=min_chunks,
                    **dict(FULL, seq_idx=False, initial_states=packed))  # fmt: skip
    if packed:
        t = torch.arange(100)
        row = sum((t >= cut).int() for cut in (48, 53, 64, 90))
        kw["seq_idx"] = torch.stack([row, row.clamp(max=1)]).to(torch.int32)
    plan = dataclasses.replace(plan_for(kw["x"], kw["B"]), chunk=16, split_walk_programs=10**6,
                               split_walk_min_chunks=min_chunks)  # fmt: skip
    from ssmscan.ops.ssd_scan.triton_walk import walk_parts

    assert walk_parts(6, 7, plan) == {1: (7, 1), 2: (3, 3), 3: (2, 4)}[min_chunks]
    _check(kw, (0.0, INF), packed, plan, DTYPES[dt], 100 + min_chunks)


def test_walk_parts_split_only_few_programs():
    """The split's choice: whole walks at many programs or symbolic sizes; else parts enough for
    the target, of at least the plan's fewest chunks, none empty."""
    from ssmscan.ops.common.device import H200
    from ssmscan.ops.ssd_scan.plan import plan_ssd
    from ssmscan.ops.ssd_scan.triton_walk import walk_parts

    plan = dataclasses.replace(plan_ssd(48, 64, 1, 128, torch.bfloat16, H200),
                               split_walk_programs=528, split_walk_min_chunks=16)  # fmt: skip
    assert walk_parts(640, 32, plan) == (1, 32)  # 8 x 80 heads: enough programs
    assert walk_parts(48, 1024, plan) == (11, 94)  # one sequence of 65536, 48 heads
    assert walk_parts(48, 40, plan) == (2, 20)  # too few chunks for more parts
    assert walk_parts(48, 31, plan) == (1, 31)
    parts, per = walk_parts(5, 100, plan)
    assert (parts - 1) * per < 100 <= parts * per and per >= 16
    assert walk_parts(48, 1024, dataclasses.replace(plan, split_walk_programs=0)) == (1, 1024)
    planned = plan_ssd(48, 64, 1, 128, torch.bfloat16, H200)
    assert (planned.split_walk_programs, planned.split_walk_min_chunks) == (4 * 132, 64)
    assert walk_parts(48, 127, planned) == (1, 127)  # under 128 chunks: whole
    assert walk_parts(48, 128, planned) == (2, 64)


@pytest.mark.triton
@_INTERP
def test_triton_interpreter_strided_inputs(ssd_inputs):
    """x, dt, B, C, z and dout as non-contiguous views (a transpose of their storage, a step of
    2 in time): the launchers read them as their values, not their storage."""
    kw = ssd_inputs(batch=2, L=40, nheads=4, headdim=4, ngroups=2, dstate=8, seed=9, **FULL)

    def strided(t):  # same values; time-major storage with every other step unused
        buf = torch.empty((t.shape[1] * 2, t.shape[0], *t.shape[2:]), dtype=t.dtype)
        view = buf[::2].transpose(0, 1)
        view.copy_(t)
        return view

    for k in ("x", "dt", "B", "C", "z"):
        kw[k] = strided(kw[k])
        assert not kw[k].is_contiguous()
    plan = dataclasses.replace(plan_for(kw["x"], kw["B"]), chunk=16)
    _check(kw, (0.0, INF), True, plan, torch.float32, 40)


def test_float64_runs_the_cpu_kernel_on_host_copies(ssd_inputs):
    """float64 (no Triton path): the launchers run the CPU kernel on host copies, equal to the
    float64 reference to the float64 tolerance."""
    kw = ssd_inputs(batch=2, L=37, nheads=4, headdim=4, ngroups=2, dstate=8,
                    dtype=torch.float64, seed=4, **FULL)  # fmt: skip
    _check(kw, (0.0, INF), True, None, torch.float64, 37)


@pytest.mark.triton
@_INTERP
def test_triton_interpreter_empty(ssd_inputs):
    """L = 0: no launch; the final state is the initial one, its gradient dfinal, every other
    gradient zero."""
    kw = ssd_inputs(batch=2, L=0, nheads=2, headdim=4, ngroups=1, dstate=8, initial_states=True,
                    z=True)  # fmt: skip
    dout, dfinal = _dout_dfinal(kw, 0, True)
    out, final, grads = _run_launchers(kw, (0.0, INF), dout, dfinal, None)
    assert out.shape == kw["x"].shape
    torch.testing.assert_close(final, kw["initial_states"], rtol=0, atol=0)
    torch.testing.assert_close(grads.pop("initial_states"), dfinal, rtol=0, atol=0)
    assert all(bool((g == 0).all()) for g in grads.values())


@pytest.mark.triton
@pytest.mark.slow
@_INTERP
@pytest.mark.parametrize("dt", ["fp32", "bf16"])
@pytest.mark.parametrize("packed", [False, True], ids=["plain", "packed"])
@pytest.mark.parametrize("L", [63, 64, 65, 129, 300])
def test_triton_interpreter_grid(L, packed, dt, ssd_inputs):
    """The planner's plan at chunk boundaries and one long length, every optional input."""
    opts = dict(FULL, seq_idx=packed)
    kw = ssd_inputs(batch=2, L=L, nheads=4, headdim=8, ngroups=2, dstate=16, dtype=DTYPES[dt],
                    seed=L, **opts)  # fmt: skip
    _check(kw, (0.001, 0.09), L % 2 == 1, plan_for(kw["x"], kw["B"]), DTYPES[dt], L)


# --- on a GPU -------------------------------------------------------------------------------------


def _cuda(kw):
    return {k: (v.cuda() if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}


def _op_grads(fn, kw, dout, dfinal):
    leaves = {k: (v.detach().clone().requires_grad_() if isinstance(v, torch.Tensor) and
                  v.is_floating_point() else v) for k, v in kw.items()}  # fmt: skip
    out, final = fn(*(leaves.get(k) for k in ARGS))
    torch.autograd.backward([out, final], [dout, dfinal])
    return out, final, {k: leaves[k].grad for k in GRADS if leaves.get(k) is not None}


def _op(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx):
    return torch.ops.ssmscan.ssd_scan_fwd(
        x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, True, 0.0, INF, 64
    )


def _check_op_on_gpu(kw, L, dtype):
    """The op on CUDA copies of ``kw``: output, final state and every gradient against float64
    (computed on the GPU) at ``dtype``'s tolerance."""
    dout, dfinal = _dout_dfinal(kw, L, True)
    out, final, grads = _op_grads(_op, _cuda(kw), dout.cuda(), dfinal.cuda())
    _assert_matches(out, final, grads, _reference(kw, (0.0, INF), dout, dfinal, "cuda"), dtype)


@pytest.mark.gpu
@_CUDA
@pytest.mark.parametrize("dt", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("L", [1, 63, 65, 1000])
def test_gpu_op(L, dt, ssd_inputs):
    """The op on CUDA tensors (the Triton kernels), headdim 64 and dstate 128 (Mamba-2's)."""
    kw = ssd_inputs(batch=2, L=L, nheads=4, headdim=64, ngroups=2, dstate=128,
                    dtype=DTYPES[dt], seed=L, **FULL)  # fmt: skip
    _check_op_on_gpu(kw, L, DTYPES[dt])


@pytest.mark.gpu
@_CUDA
@pytest.mark.parametrize("dt", ["fp32", "bf16"])
@pytest.mark.parametrize("headdim,dstate", [(32, 32), (32, 256), (128, 64), (256, 128), (256, 256)])
def test_gpu_op_head_geometries(headdim, dstate, dt, ssd_inputs):
    """headdim and dstate over 32-256 (the planner's tiles and loops at each), every option,
    across a chunk boundary, against float64."""
    kw = ssd_inputs(batch=2, L=130, nheads=4, headdim=headdim, ngroups=2, dstate=dstate,
                    dtype=DTYPES[dt], seed=headdim + dstate, **FULL)  # fmt: skip
    _check_op_on_gpu(kw, 130, DTYPES[dt])


@pytest.mark.gpu
@_CUDA
@pytest.mark.parametrize("L", [65, 1000])
def test_gpu_op_float32_tf32(L, ssd_inputs):
    """float32 inputs where the caller allows TF32 (``torch.set_float32_matmul_precision
    ("high")``): the plan takes plain TF32, whose operands carry float16's 10-bit mantissa, so
    every result is held to float16's tolerance; back at "highest" the float32 one holds."""
    kw = ssd_inputs(batch=2, L=L, nheads=4, headdim=64, ngroups=2, dstate=128,
                    dtype=torch.float32, seed=L, **FULL)  # fmt: skip
    on_gpu = _cuda(kw)
    dout, dfinal = _dout_dfinal(kw, L, True)
    r_out, r_final, r_grads = _reference(kw, (0.0, INF), dout, dfinal, "cuda")
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("high")
        assert plan_for(on_gpu["x"], on_gpu["B"]).precision == "tf32"
        out, final, grads = _op_grads(_op, on_gpu, dout.cuda(), dfinal.cuda())
    finally:
        torch.set_float32_matmul_precision(before)
    assert_close_to_reference("out", out, r_out, torch.float16)
    assert_close_to_reference("final_states", final, r_final, torch.float16)
    for k, g in grads.items():
        assert_close_to_reference(f"d{k}", g, r_grads[k], torch.float16)
    assert plan_for(on_gpu["x"], on_gpu["B"]).precision == "tf32x3"


@pytest.mark.gpu
@_CUDA
# the float64 reference's autograd holds tens of GB at L 1000: one such case at a time
# (``--dist loadgroup``, as ``benchmarks/device.sh tests`` runs the GPU suite)
@pytest.mark.xdist_group("large-float64-reference")
@pytest.mark.parametrize("dt", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("L", [63, 1000])
def test_gpu_op_walking(L, dt, ssd_inputs):
    """Enough heads to fill the device, with every option, against float64, in every dtype."""
    from ssmscan.ops.common.device import device_facts

    nheads = 2 * -(-device_facts(torch.device("cuda")).sm_count // 4)  # 2 x nheads fill it
    kw = ssd_inputs(batch=2, L=L, nheads=nheads, headdim=64, ngroups=2, dstate=128,
                    dtype=DTYPES[dt], seed=L, **FULL)  # fmt: skip
    _check_op_on_gpu(kw, L, DTYPES[dt])


@pytest.mark.gpu
@_CUDA
@pytest.mark.parametrize("L", [8191, 8200])
def test_gpu_op_one_long_sequence(L, ssd_inputs):
    """One long sequence of few heads (few programs for the walks), with every option, against
    float64."""
    kw = ssd_inputs(batch=1, L=L, nheads=4, headdim=16, ngroups=2, dstate=32,
                    dtype=torch.bfloat16, seed=L, **FULL)  # fmt: skip
    _check_op_on_gpu(kw, L, torch.bfloat16)


@pytest.mark.gpu
@_CUDA
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_gpu_compile_fullgraph(dynamic, ssd_inputs):
    """torch.compile(fullgraph=True) with Inductor traces into the kernels (wrap_triton) and
    matches eager, forward and backward; with dynamic shapes a new length adds no graph."""
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("inductor")
    compiled = torch.compile(_op, backend=counter, fullgraph=True, dynamic=dynamic or None)
    frames = []
    for L in (100, 300) if dynamic else (100,):
        kw = _cuda(ssd_inputs(batch=2, L=L, nheads=4, headdim=64, ngroups=1, dstate=64,
                              seed=L, **FULL))  # fmt: skip
        dout, dfinal = (t.cuda() for t in _dout_dfinal(kw, L, True))
        got = _op_grads(compiled, kw, dout, dfinal)
        want = _op_grads(_op, kw, dout, dfinal)
        torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(got[1], want[1], rtol=1e-5, atol=1e-5)
        for k in want[2]:
            torch.testing.assert_close(got[2][k], want[2][k], rtol=1e-5, atol=1e-5, msg=k)
        frames.append(counter.frame_count)
    assert frames[0] == 1 and frames[-1] == frames[0]  # one graph; a new length adds none


@pytest.mark.triton
def test_forward_host_code_adds_no_guard_on_length(monkeypatch, ssd_inputs):
    """The forward's host code as torch.export traces it (a triton_op's body on fake tensors,
    each launch's arguments prepared as a traced launch prepares them; the kernels themselves
    are not traced on the CPU) leaves L free over [1, 65536]: a per-chunk buffer with a
    dimension that is 1 for L <= Q made the traced launch guard it, and a dynamic-L export of
    a Mamba-2 model failed on the GPU (``test_gpu_export_dynamic_length`` there)."""
    from ssmscan.ops.common import triton_launch
    from ssmscan.ops.ssd_scan import triton_fwd

    def prepare_only(self, grid, *args, **kwargs):
        self.traced_args(args, kwargs, triton_launch._first_tensor(args, kwargs))

    monkeypatch.setattr(triton_launch._Launcher, "_launch", prepare_only)
    name = "ssmscan_test::ssd_forward_host"

    @torch.library.triton_op(name, mutates_args=())
    def forward(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor,
                C: torch.Tensor, D: torch.Tensor, z: torch.Tensor,
                dt_bias: torch.Tensor) -> torch.Tensor:  # fmt: skip
        plan = plan_for(x, B)
        out, final = empty_forward_outputs(x, B)
        triton_fwd.launch(x, dt, A, B, C, D, z, dt_bias, None, None, True, 0.0, INF, out, final,
                          plan=plan)  # fmt: skip
        return out

    op = getattr(torch.ops.ssmscan_test, name.split("::")[1])

    class Scan(torch.nn.Module):
        def forward(self, x, dt, A, B, C, D, z, dt_bias):
            return op(x, dt, A, B, C, D, z, dt_bias)

    kw = ssd_inputs(batch=1, L=100, nheads=2, headdim=16, ngroups=1, dstate=16, z=True,
                    dt_bias=True, dt_softplus=True)  # fmt: skip
    args = tuple(kw[k] for k in ARGS[:8])
    Ld = torch.export.Dim("L", min=1, max=65536)
    per_l = {1: Ld}
    dyn = (per_l, per_l, None, per_l, per_l, None, per_l, None)
    ep = torch.export.export(Scan(), args, dynamic_shapes=dyn, strict=False)
    (rng,) = ep.range_constraints.values()
    assert (rng.lower, rng.upper) == (1, 65536)


@pytest.mark.triton
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_forward_host_code_splits_static_walks_only(monkeypatch, dynamic, ssd_inputs):
    """Traced by torch.export (launches prepared as in the test above, not run), the forward
    of a plan that splits every walk (Note [SSD split walks]) launches the parts' ends, the
    pass and the parts for a static L, and the whole walk for a dynamic one (the choice would
    guard on L)."""
    from ssmscan.ops.common import triton_launch
    from ssmscan.ops.ssd_scan import triton_fwd

    launched = []

    def prepare_only(self, grid, *args, **kwargs):
        launched.append((self._jit.fn.__name__, kwargs.get("PART")))
        self.traced_args(args, kwargs, triton_launch._first_tensor(args, kwargs))

    monkeypatch.setattr(triton_launch._Launcher, "_launch", prepare_only)
    name = f"ssmscan_test::ssd_forward_split_{'dynamic' if dynamic else 'static'}"

    @torch.library.triton_op(name, mutates_args=())
    def forward(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor,
                C: torch.Tensor) -> torch.Tensor:  # fmt: skip
        plan = dataclasses.replace(plan_for(x, B), split_walk_programs=10**6,
                                   split_walk_min_chunks=1)  # fmt: skip
        out, final = empty_forward_outputs(x, B)
        triton_fwd.launch(x, dt, A, B, C, None, None, None, None, None, True, 0.0, INF, out,
                          final, plan=plan)  # fmt: skip
        return out

    op = getattr(torch.ops.ssmscan_test, name.split("::")[1])

    class Scan(torch.nn.Module):
        def forward(self, x, dt, A, B, C):
            return op(x, dt, A, B, C)

    kw = ssd_inputs(batch=1, L=200, nheads=2, headdim=16, ngroups=1, dstate=16)
    args = tuple(kw[k] for k in ARGS[:5])
    per_l = {1: torch.export.Dim("L", min=1, max=65536)}
    dyn = (per_l, per_l, None, per_l, per_l) if dynamic else None
    torch.export.export(Scan(), args, dynamic_shapes=dyn, strict=False)
    walks = [entry for entry in launched if entry[0] != "_ssd_scan_fwd_out_kernel"]
    if dynamic:
        assert walks == [("_ssd_scan_states_walk_kernel", 0)]
    else:
        assert walks == [("_ssd_scan_states_walk_kernel", 1), ("_ssd_scan_parts_pass_kernel", None),
                         ("_ssd_scan_states_walk_kernel", 2)]  # fmt: skip


@pytest.mark.gpu
@_CUDA
def test_gpu_export_dynamic_length(ssd_inputs):
    """torch.export with L free over [1, 65536] on CUDA tensors: the launchers' per-chunk
    buffers (one chunk for L <= 64) add no guard on L, and the program matches eager at lengths
    on both sides of a chunk."""

    class Scan(torch.nn.Module):
        def forward(self, x, dt, A, B, C, D, z, dt_bias, initial_states):
            return _op(x, dt, A, B, C, D, z, dt_bias, initial_states, None)

    def inputs(L):
        kw = _cuda(ssd_inputs(batch=2, L=L, nheads=4, headdim=64, ngroups=1, dstate=64,
                              seed=L, **dict(FULL, seq_idx=False)))  # fmt: skip
        return tuple(kw[k] for k in ARGS[:9])

    Ld = torch.export.Dim("L", min=1, max=65536)
    per_l = {1: Ld}
    dyn = (per_l, per_l, None, per_l, per_l, None, per_l, None, None)
    ep = torch.export.export(Scan(), inputs(100), dynamic_shapes=dyn, strict=False)
    for L in (1, 64, 65, 300):
        args = inputs(L)
        got, want = ep.module()(*args), Scan()(*args)
        torch.testing.assert_close(got[0], want[0], rtol=0, atol=0)
        torch.testing.assert_close(got[1], want[1], rtol=0, atol=0)


@pytest.mark.triton
@_INTERP
@pytest.mark.parametrize(
    "strong",
    [
        pytest.param(False, id="gentle"),
        pytest.param(True, id="strong"),
    ],
)
def test_triton_interpreter_strong_decays(strong, ssd_inputs):
    """Time steps of several units and A down to -24 (a randomly initialized 130m model):
    log-decay sums reach thousands within a chunk."""
    kw = ssd_inputs(batch=2, L=130, nheads=4, headdim=4, ngroups=1, dstate=8, D_shape="head",
                    dt_bias=True, initial_states=True)  # fmt: skip
    if strong:
        g = torch.Generator().manual_seed(3)
        kw["dt"] = torch.rand(kw["dt"].shape, generator=g) * 4
        kw["A"] = -(1 + 23 * torch.rand(kw["A"].shape, generator=g))
    _check(kw, (0.0, INF), True, plan_for(kw["x"], kw["B"]), torch.float32, 0)
