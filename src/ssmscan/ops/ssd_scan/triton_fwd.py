"""Triton kernels of ``ssmscan::ssd_scan_fwd`` (CUDA), and their launcher.

Note [SSD Triton forward]: the chunked form of README.md's Note [SSD chunked form] in two
launches, every matmul a ``tl.dot`` with float32 accumulation:

1. the states walk (``triton_walk._ssd_scan_states_walk_kernel``), one program per sequence,
   head and (headdim, dstate) tile, walking the chunks in turn with its state on chip: the time
   step (bias, softplus, clamp; 0 past L) and its cumulative log-decay ``cs = cumsum(dt A)``
   within each chunk (written once per chunk and head for the output kernel), the state entering
   each chunk (written in x's dtype for 16-bit inputs, else float32: ``plan.fwd_states_16``)
   and the final state. A step is one small matmul, independent of the others but for the state
   update, so the chunks' loads overlap.
2. ``_ssd_scan_fwd_out_kernel``, one program per (chunk, batch x head, headdim block), every
   chunk in parallel: ``C Bᵀ`` and ``C Sᵀ`` in one loop over dstate, then
   ``y = (C Bᵀ ∘ decay) (dt x) + exp(cs) ∘ C Sᵀ``, the skip ``D x`` and the gate ``silu(z)``,
   written in x's dtype, with ``decay_ij = exp(sum_{j<k<=i} dt_k A)`` (``_pair_log_decays``, a
   ``tl.cumsum`` over the (CHUNK, CHUNK) tile, taken after the dstate loop: not live across it).

The states cross memory once each way; nothing is passed in place. A walk has only batch x heads
x state tiles programs, yet it beat the chunk-parallel alternative (each chunk's own state in
parallel, then a pass over the chunks, then the output) at every size timed, one sequence of
few heads included: that pass loops over every chunk too (``plan.py`` has the timings). A walk
with few programs over a long sequence is split into parts instead (Note [SSD split walks] in
``triton_walk``).

Each decay inside a chunk is the exponential of a sum of its own increments, never a float32
difference ``cs_i - cs_j`` of cumulative sums: these reach thousands within a chunk at strong
decays (time steps of a few units, A near -24), where the difference keeps no digit of a decay
near 1. ``exp(cs_j)`` (the state entering the chunk) and ``exp(cs_last)`` (the carry) take
no difference. (The backward takes its decays elementwise from two-float log-decays instead,
Note [SSD two-float log-decays] in ``triton_bwd``; in this kernel they measured slower: RESULTS.)

Note [SSD C·Bᵀ once per group]: every head of a group shares B and C, so ``C_c B_cᵀ`` of a
chunk is the same (CHUNK, CHUNK) product for all of them. Where the plan says so
(``plan.cb_once``), ``_ssd_scan_cb_kernel`` computes it once per chunk and group, float32
(batch, ngroups, chunks, CHUNK, CHUNK), with the same operand rounding as its reader, and the
backward's dx / dt kernel reads it instead of its loop of products over dstate (a fifth of its
matmul work at Mamba-2's sizes, and B's loads): 3% off the backward at mamba2-2.7b's and
-130m's sizes (H100, bf16). The output kernel keeps its own product, in the loop over dstate
that also reads C for ``C Sᵀ``.

Operands of the forward's matmuls are in x's dtype (the state and the masked C·Bᵀ are rounded to
it for 16-bit inputs, as in mamba-ssm, unless ``plan.fwd_f32_dot``); float32 operands at the
plan's ``precision``. The states are (b, chunks, nheads, headdim, dstate). Packed sequences (``seq_idx``) enter as segment ids
(``common.segment_ids``) and become the 0/1 masks of the Note. float64 runs the CPU kernel on
host copies (correct, not fast).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ssmscan.ops.common.host_math import cdiv, next_pow2
from ssmscan.ops.common.triton_launch import launcher
from ssmscan.ops.ssd_scan.common import segment_ids
from ssmscan.ops.ssd_scan.plan import SSDPlan, plan_for
from ssmscan.ops.ssd_scan.shapes import empty_forward_outputs

# --- helpers shared with the backward -----------------------------------------------------------


@triton.jit
def _softplus(x):
    """log(1 + exp(x)), x above 20 passed through (PyTorch's threshold); log1p by Kahan's
    correction (no libdevice: the interpreter runs it too)."""
    y = tl.exp(tl.minimum(x, 20.0))
    u = 1.0 + y
    lp = tl.where(u == 1.0, y, tl.log(u) * (y / tl.where(u == 1.0, 1.0, u - 1.0)))
    return tl.where(x > 20.0, x, lp)


@triton.jit
def _time_step(
    p_dt,  # pointers to the raw time steps of a chunk (CHUNK,)
    m_t,  # (CHUNK,) steps inside L
    p_bias,  # pointer to dt_bias[h]
    dt_min,  # clamp (HAS_MIN)
    dt_max,  # clamp (HAS_MAX)
    SOFTPLUS: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_MIN: tl.constexpr,
    HAS_MAX: tl.constexpr,
):
    """clamp(softplus(dt + dt_bias), dt_min, dt_max) in float32, 0 past L."""
    b_d = tl.load(p_dt, mask=m_t, other=0.0).to(tl.float32)
    if HAS_BIAS:
        b_d += tl.load(p_bias).to(tl.float32)
    if SOFTPLUS:
        b_d = _softplus(b_d)
    # the bounds as float32 scalars: Inductor passes a Python float to a user kernel as float64
    # (torch.compile), which would otherwise promote the time steps and all that follows
    if HAS_MIN:
        b_d = tl.maximum(b_d, tl.full((), dt_min, tl.float32))
    if HAS_MAX:
        b_d = tl.minimum(b_d, tl.full((), dt_max, tl.float32))
    return tl.where(m_t, b_d, 0.0)


@triton.jit
def _segments(seg, i_b, i_c, o_t, L, CHUNK: tl.constexpr):
    """(segment of each step (padding continues the last), of the step before the chunk (0 before
    the first), of the chunk's last step)."""
    b_s = tl.load(seg + i_b * L + tl.minimum(o_t, L - 1))
    s_prev = tl.load(seg + i_b * L + tl.maximum(i_c * CHUNK - 1, 0), mask=i_c > 0, other=0)
    s_last = tl.load(seg + i_b * L + tl.minimum(i_c * CHUNK + CHUNK - 1, L - 1))
    return b_s, s_prev, s_last


@triton.jit
def _pair_log_decays(b_d, a, CHUNK: tl.constexpr):
    """(CHUNK, CHUNK) ``[i, j] = sum_{j < k <= i} dt_k a`` for j <= i (0 on and above the
    diagonal) from the time steps ``b_d`` (CHUNK,) and A's ``a``: each sum over its own
    increments, never a difference ``cs_i - cs_j`` of two cumulative sums (which float32 loses at
    strong decays, where these reach thousands within a chunk)."""
    o_i = tl.arange(0, CHUNK)
    b_inc = tl.where(o_i[:, None] > o_i[None, :], (b_d * a)[:, None], 0.0)  # [k, j]: k > j
    return tl.cumsum(b_inc, 0)


@triton.jit
def _pair_decay(b_ld, b_s, CHUNK: tl.constexpr, HAS_SEG: tl.constexpr):
    """(CHUNK, CHUNK) exp of ``_pair_log_decays`` where j <= i (in one sequence), else 0."""
    o_i = tl.arange(0, CHUNK)
    keep = o_i[:, None] >= o_i[None, :]
    if HAS_SEG:
        keep = keep & (b_s[:, None] == b_s[None, :])
    return tl.exp(tl.where(keep, b_ld, float("-inf")))


@triton.jit
def _round_tf32(a):
    """float32 rounded to TF32's 10-bit mantissa (to nearest, ties to even), as the tensor cores
    read a TF32 operand."""
    i = a.to(tl.int32, bitcast=True)
    i = (i + 0xFFF + ((i >> 13) & 1)) & -8192
    return i.to(tl.float32, bitcast=True)


@triton.jit
def _cast(a, T: tl.constexpr, EMULATE: tl.constexpr):
    """float32 ``a`` in dtype T, rounded to nearest even as the GPU rounds. EMULATE (Triton's
    interpreter, 3.6, which truncates a float32 -> bfloat16 cast): rounded in float32 first, so
    the cast is exact."""
    if EMULATE:
        if T == tl.bfloat16:
            i = a.to(tl.int32, bitcast=True)
            i = (i + 0x7FFF + ((i >> 16) & 1)) & -65536
            a = i.to(tl.float32, bitcast=True)
    return a.to(T)


@triton.jit
def _dot(a, b, PRECISION: tl.constexpr, EMULATE: tl.constexpr):
    """``tl.dot(a, b)`` at PRECISION with float32 accumulation. EMULATE (Triton's interpreter):
    the operands rounded as the tensor cores would read them (TF32 when PRECISION is "tf32"),
    then multiplied in IEEE float32; 16-bit operands multiplied in float32 too, since the
    interpreter (3.6) multiplies bfloat16 operands as their raw 16-bit patterns."""
    if EMULATE:
        a32 = a.to(tl.float32)
        b32 = b.to(tl.float32)
        if PRECISION == "tf32":
            a32 = _round_tf32(a32)
            b32 = _round_tf32(b32)
        c = tl.dot(a32, b32, input_precision="ieee")
    else:
        c = tl.dot(a, b, input_precision=PRECISION)
    return c


@triton.jit
def _last(b, CHUNK: tl.constexpr):
    """The last element of a (CHUNK,) block."""
    return tl.sum(tl.where(tl.arange(0, CHUNK) == CHUNK - 1, b, 0.0), 0)


# --- kernels --------------------------------------------------------------------------------------


@triton.jit
def _ssd_scan_cb_kernel(
    B,  # (batch, L, ngroups, dstate)
    C,  # (batch, L, ngroups, dstate)
    cb,  # (batch, ngroups, NC, CHUNK, CHUNK) fp32 output
    L,  # time steps
    G,  # ngroups
    N,  # dstate
    NC,  # chunks
    CHUNK: tl.constexpr,
    BLOCK_N: tl.constexpr,
    PRECISION: tl.constexpr,
    F32_DOT: tl.constexpr,  # matmul operands in float32 (at PRECISION); else in B's dtype
    EMULATE: tl.constexpr,  # the interpreter: _dot emulates the tensor cores' rounding
):
    """``C_c B_cᵀ`` of one chunk and group (Note [SSD C·Bᵀ once per group]); rows past L are
    zero."""
    i_c = tl.program_id(0).to(tl.int64)
    i_bg = tl.program_id(1).to(tl.int64)
    i_b = i_bg // G
    i_g = i_bg % G
    o_i = tl.arange(0, CHUNK)
    o_t = i_c * CHUNK + o_i
    b_cb = _chunk_cb(B, C, i_b, i_g, o_t, o_t < L, L, G, N, CHUNK, BLOCK_N, PRECISION, F32_DOT,
                     EMULATE)  # fmt: skip
    tl.store(cb + (i_bg * NC + i_c) * CHUNK * CHUNK + o_i[:, None] * CHUNK + o_i[None, :], b_cb)


@triton.jit
def _chunk_cb(B, C, i_b, i_g, o_t, m_t, L, G, N, CHUNK: tl.constexpr, BLOCK_N: tl.constexpr,
              PRECISION: tl.constexpr, F32_DOT: tl.constexpr, EMULATE: tl.constexpr):  # fmt: skip
    """``C Bᵀ`` (CHUNK, CHUNK) float32 of a chunk's steps ``o_t`` (``m_t``: within L) and group."""
    if F32_DOT:
        DOT = tl.float32
    else:
        DOT = B.dtype.element_ty
    b_cb = tl.zeros((CHUNK, CHUNK), dtype=tl.float32)
    for n0 in range(0, N, BLOCK_N):
        o_n = n0 + tl.arange(0, BLOCK_N)
        o_bc = ((i_b * L + o_t[:, None]) * G + i_g) * N + o_n[None, :]
        m_bc = m_t[:, None] & (o_n < N)[None, :]
        b_C = tl.load(C + o_bc, mask=m_bc, other=0.0).to(DOT)
        b_B = tl.load(B + o_bc, mask=m_bc, other=0.0).to(DOT)
        b_cb += _dot(b_C, tl.trans(b_B), PRECISION, EMULATE)
    return b_cb


@triton.jit
def _load_cb(cb, i_b, i_g, i_c, G, NC, CHUNK: tl.constexpr):
    """Chunk ``i_c``'s ``C Bᵀ`` of group ``i_g`` from ``_ssd_scan_cb_kernel``'s output."""
    o_i = tl.arange(0, CHUNK)
    o = ((i_b * G + i_g) * NC + i_c) * CHUNK * CHUNK + o_i[:, None] * CHUNK + o_i[None, :]
    return tl.load(cb + o)


@triton.jit
def _ssd_scan_fwd_out_kernel(
    x,  # (batch, L, nheads, headdim)
    z,  # (batch, L, nheads, headdim) gate (HAS_Z)
    Dv,  # (nheads, headdim) or (nheads,) skip (HAS_D)
    B,  # (batch, L, ngroups, dstate)
    C,  # (batch, L, ngroups, dstate)
    seg,  # (batch, L) int64 segment ids (HAS_SEG)
    A,  # (nheads,)
    dtp,  # (batch, nheads, NC * CHUNK) fp32 time step
    cs,  # (batch, nheads, NC * CHUNK) fp32 cumsum of dt * A within each chunk
    states,  # (batch, NC, nheads, headdim, dstate) state entering each chunk (fp32 or x's dtype)
    out,  # (batch, L, nheads, headdim) output, x's dtype
    L,  # time steps
    H,  # nheads
    P,  # headdim
    G,  # ngroups
    N,  # dstate
    NC,  # chunks
    HAS_D: tl.constexpr,
    D_PER_HEAD: tl.constexpr,  # D is (nheads,)
    HAS_Z: tl.constexpr,
    HAS_SEG: tl.constexpr,
    CHUNK: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK_N: tl.constexpr,
    PRECISION: tl.constexpr,
    F32_DOT: tl.constexpr,  # matmul operands in float32 (at PRECISION); else in x's dtype
    EMULATE: tl.constexpr,  # the interpreter: _dot emulates the tensor cores' rounding
):
    """y = (C Bᵀ ∘ decay) (dt x) + exp(cs) ∘ (C Sᵀ) + D x, out = y silu(z) (Note [SSD Triton
    forward], 2)."""
    i_c = tl.program_id(0).to(tl.int64)
    i_bh = tl.program_id(1).to(tl.int64)
    i_p = tl.program_id(2)
    i_b = i_bh // H
    i_h = i_bh % H
    i_g = i_h // (H // G)
    if F32_DOT:
        DOT = tl.float32
    else:
        DOT = x.dtype.element_ty
    o_i = tl.arange(0, CHUNK)
    o_t = i_c * CHUNK + o_i
    m_t = o_t < L
    o_p = i_p * BLOCK_P + tl.arange(0, BLOCK_P)
    m_p = o_p < P
    o_hq = (i_b * H + i_h) * NC * CHUNK + i_c * CHUNK + o_i
    b_cs = tl.load(cs + o_hq)
    b_d = tl.load(dtp + o_hq)
    b_w = tl.exp(b_cs)
    b_s = o_i  # unused without segments
    if HAS_SEG:
        b_s, s_prev, _ = _segments(seg, i_b, i_c, o_t, L, CHUNK)
        b_w = tl.where(b_s == s_prev, b_w, 0.0)
    b_cb = tl.zeros((CHUNK, CHUNK), dtype=tl.float32)
    b_off = tl.zeros((CHUNK, BLOCK_P), dtype=tl.float32)
    p_state = states + ((i_b * NC + i_c) * H + i_h) * P * N
    for n0 in range(0, N, BLOCK_N):
        o_n = n0 + tl.arange(0, BLOCK_N)
        m_n = o_n < N
        o_bc = ((i_b * L + o_t[:, None]) * G + i_g) * N + o_n[None, :]
        m_bc = m_t[:, None] & m_n[None, :]
        b_C = tl.load(C + o_bc, mask=m_bc, other=0.0).to(DOT)
        b_B = tl.load(B + o_bc, mask=m_bc, other=0.0).to(DOT)
        b_St = _cast(tl.load(p_state + o_p[None, :] * N + o_n[:, None],
                             mask=m_n[:, None] & m_p[None, :], other=0.0).to(tl.float32),
                     DOT, EMULATE)  # fmt: skip
        b_cb += _dot(b_C, tl.trans(b_B), PRECISION, EMULATE)
        b_off += _dot(b_C, b_St, PRECISION, EMULATE)
    o_x = ((i_b * L + o_t[:, None]) * H + i_h) * P + o_p[None, :]
    m_x = m_t[:, None] & m_p[None, :]
    b_x = tl.load(x + o_x, mask=m_x, other=0.0).to(tl.float32)
    b_X = _cast(b_x * b_d[:, None], DOT, EMULATE)
    b_decay = _pair_decay(_pair_log_decays(b_d, tl.load(A + i_h).to(tl.float32), CHUNK), b_s,
                          CHUNK, HAS_SEG)  # fmt: skip
    b_M = _cast(b_cb * b_decay, DOT, EMULATE)
    b_y = b_off * b_w[:, None] + _dot(b_M, b_X, PRECISION, EMULATE)
    if HAS_D:
        if D_PER_HEAD:
            b_y += tl.load(Dv + i_h).to(tl.float32) * b_x
        else:
            b_y += tl.load(Dv + i_h * P + o_p, mask=m_p, other=0.0).to(tl.float32)[None, :] * b_x
    if HAS_Z:
        b_z = tl.load(z + o_x, mask=m_x, other=0.0).to(tl.float32)
        b_y = b_y * b_z * tl.sigmoid(b_z)
    tl.store(out + o_x, b_y.to(out.dtype.element_ty), mask=m_x)


# --- launchers ------------------------------------------------------------------------------------


def dt_flags(dt_softplus: bool, dt_bias: torch.Tensor | None, dt_min: float, dt_max: float) -> dict:
    """The time-step constexprs and the clamp's float arguments (an infinite bound is no clamp:
    no infinite literal reaches a kernel's arguments)."""
    has_min, has_max = dt_min != float("-inf"), dt_max != float("inf")
    return dict(
        dt_min=float(dt_min) if has_min else 0.0,
        dt_max=float(dt_max) if has_max else 0.0,
        SOFTPLUS=bool(dt_softplus),
        HAS_BIAS=dt_bias is not None,
        HAS_MIN=has_min,
        HAS_MAX=has_max,
    )


def chunk_cb(
    B: torch.Tensor, C: torch.Tensor, L: int, plan: SSDPlan, chunk: int, f32_dot: bool
) -> torch.Tensor:
    """``C Bᵀ`` of every chunk and group, (batch, ngroups, NC, chunk, chunk) float32 flat
    (Note [SSD C·Bᵀ once per group]), from contiguous B and C."""
    batch, _, G, N = B.shape
    NC = cdiv(L, chunk)
    cb = torch.empty((batch * G * NC * chunk * chunk,), dtype=torch.float32, device=B.device)
    launcher(_ssd_scan_cb_kernel)[(NC, batch * G)](
        B, C, cb, L, G, N, NC, CHUNK=chunk, BLOCK_N=min(max(next_pow2(N), 16), 64),
        PRECISION=precision(plan, B.dtype), F32_DOT=f32_dot, EMULATE=plan.emulate,
        num_warps=4,
    )  # fmt: skip
    return cb


def precision(plan: SSDPlan, dtype: torch.dtype) -> str:
    """The ``tl.dot`` input precision for inputs of ``dtype``: the plan's for float32; "tf32"
    (the tensor cores' float32 mode, or Triton's default for 16-bit operands, which it ignores)
    otherwise."""
    return plan.precision if dtype == torch.float32 else "tf32"


def _contiguous(t: torch.Tensor | None) -> torch.Tensor | None:
    return t.contiguous() if t is not None else None


def launch(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    dt_bias: torch.Tensor | None,
    initial_states: torch.Tensor | None,
    seq_idx: torch.Tensor | None,
    dt_softplus: bool,
    dt_min: float,
    dt_max: float,
    out: torch.Tensor,
    final_states: torch.Tensor,
    plan: SSDPlan | None = None,
) -> None:
    """Run the forward into the preallocated ``out`` and ``final_states``
    (``shapes.empty_forward_outputs``) by ``plan`` (the planner's if None). Inputs may have any
    strides (non-contiguous ones are copied)."""
    if x.dtype == torch.float64:
        _launch_host(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, dt_softplus,
                     dt_min, dt_max, out, final_states)  # fmt: skip
        return
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(
            f"ssmscan ssd_scan Triton kernels take float32/16, bfloat16 or float64 x; got {x.dtype}"
        )
    plan = plan if plan is not None else plan_for(x, B)
    batch, L, H, P = x.shape
    G, N = B.shape[2], B.shape[3]
    if L == 0 or batch == 0:
        if initial_states is not None:
            final_states.copy_(initial_states)
        else:
            final_states.zero_()
        return
    x, dt, B, C = x.contiguous(), dt.contiguous(), B.contiguous(), C.contiguous()
    z = _contiguous(z)
    seg = segment_ids(seq_idx) if seq_idx is not None else None
    init = _contiguous(initial_states)
    opts = dt_flags(dt_softplus, dt_bias, dt_min, dt_max)
    from ssmscan.ops.ssd_scan import triton_walk  # it builds on this module's helpers

    # Note [SSD Triton forward]: the states walk, then the output kernel
    f32_dot = plan.fwd_f32_dot and x.dtype != torch.float32
    dtp, cs, _, states = triton_walk.launch_states(x, dt, A, B, dt_bias, init, seg,
                                                   final_states, opts, plan, f32_dot,
                                                   forward=True)  # fmt: skip
    chunk, block_p, block_n = plan.fwd_chunk, plan.out_block_p, plan.out_block_n
    NC = cdiv(L, chunk)
    grid = (NC, batch * H, cdiv(P, block_p))
    launcher(_ssd_scan_fwd_out_kernel)[grid](
        x, z, D, B, C, seg, A, dtp, cs, states, out, L, H, P, G, N, NC,
        HAS_D=D is not None, D_PER_HEAD=D is not None and D.dim() == 1, HAS_Z=z is not None,
        HAS_SEG=seg is not None, CHUNK=chunk, BLOCK_P=block_p, BLOCK_N=block_n,
        PRECISION=precision(plan, x.dtype), F32_DOT=f32_dot, EMULATE=plan.emulate,
        num_warps=plan.warps_out, num_stages=plan.out_stages,
    )  # fmt: skip


def _launch_host(*args: object) -> None:
    """float64: no Triton path; the CPU kernel on host copies (correct, not fast). ``args``:
    ``launch``'s, without the plan."""
    from ssmscan.ops.ssd_scan import cpu

    host = [t.cpu() if isinstance(t, torch.Tensor) else t for t in args[:13]]
    out, final_states = args[13], args[14]
    assert isinstance(out, torch.Tensor) and isinstance(final_states, torch.Tensor)
    res = cpu.ssd_forward(*host, 64)  # type: ignore[arg-type, call-arg]  # launch's arguments, listed
    out.copy_(res[0])
    final_states.copy_(res[1])


def forward(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    dt_bias: torch.Tensor | None,
    initial_states: torch.Tensor | None,
    seq_idx: torch.Tensor | None,
    dt_softplus: bool,
    dt_min: float,
    dt_max: float,
    plan: SSDPlan | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, final_states), fresh (``shapes.empty_forward_outputs``), from the kernels, by
    ``plan`` (the planner's if None; an experiment's own, e.g. a ``dataclasses.replace`` of it)."""
    out, final = empty_forward_outputs(x, B)
    launch(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, dt_softplus, dt_min, dt_max,
           out, final, plan)  # fmt: skip
    return out, final
