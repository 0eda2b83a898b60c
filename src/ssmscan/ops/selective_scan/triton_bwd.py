"""Triton backward kernel of ``ssmscan::selective_scan_bwd`` (CUDA).

Note [selective scan backward]
------------------------------
With x_t = delta_t + bias, dt_t = softplus(x_t) (or x_t), a_t = exp(dt_t A), h_t = a_t h_{t-1} +
dt_t u_t B_t, y_t = sum_n C_t h_t + D u_t and out_t = y_t silu(z_t), the adjoint g_t = dL/dh_t obeys

    dy_t = dout_t silu(z_t),            dz_t = dout_t y_t silu'(z_t)
    g_t  = C_t dy_t + a_{t+1} g_{t+1},  g_{L-1} = C_{L-1} dy_{L-1} + dlast_state

and, with q_t = g_t a_t h_{t-1} (per n):

    d dt_t   = sum_n q_t A + u_t sum_n g_t B_t          ddelta_t = d dt_t * sigmoid(x_t)
    du_t     = dt_t sum_n g_t B_t + D dy_t              dA   = sum_{b,t} q_t dt_t
    dB_t[n]  = sum_d g_t dt_t u_t                       dC_t[n] = sum_d dy_t h_t
    dD       = sum_{b,t} dy_t u_t                       dinitial_state = a_0 g_0

The walk goes backward over the CHECKPOINT_LEN chunks. For each chunk the states are recomputed
from its checkpoint, and the state at the start of every 4-step tile is written to a scratch
buffer (channel-contiguous (NP, dim) layout, as every state-shaped buffer here: each thread owns
one channel with all its states, Note [selective scan thread layout]); then the tiles are visited in reverse: each recomputes its four states (kept in
registers), produces y_t, dz_t and the dC_t partial, and runs the adjoint back through them.
About three exp2 per (d, n, t): chunk pass, tile recompute, reverse step.

Reductions are deterministic: dB / dC over the channels of a program are tree sums in registers
written to per-block partial buffers, dA / dD / ddelta_bias to per-(batch, segment) partials; the
finish kernel (``triton_bwd_reduce``) sums the partials in a fixed order. With L split into segments (Note [selective scan
segments]) a local adjoint pass and a carry pass first give each segment its entering adjoint.

Note [selective scan backward tiles]
------------------------------------
The plan (``plan.plan_backward``) picks the main kernel; read them with
``benchmarks/selective_scan/sass_report.py --bwd`` (sm_90, per time step of the reverse-tile
loop, (8, 4096, 2048, 16) fp32, real config):

* "column" (the previous kernel, deleted after the H200 timing below; in git history before
  this note's commit): state offsets that Triton proved 16-aligned, so it vectorized them along
  the channels and spread a channel's states over threads and warps; one column load / store per
  step (26 LDG.32 + 5 STG.32), 25 BAR + 26 STS / LDS + 50 SHFL, 583 instructions, 255 registers;
* "tile" (``_selective_scan_bwd_tile_kernel``): one channel per thread with all its states (the
  ``max(dim, 1)`` of the forward), (BLOCK_D, 4) tiles of u / delta / z / dout read and du / ddelta
  / dz written as one vector per thread (the columns taken in registers with ``_col``); but every
  dB_t / dC_t sum over the block's channels is now a 5-level butterfly on all NP values per thread
  (``tl.sum(axis=0)``): 160 SHFL per step, plus shared memory across warps;
* "tile_rs": the same with the dB_t / dC_t sums as a *reduce-scatter* over the lanes of one warp
  (``_warp_reduce_scatter``, BLOCK_D = 32, one warp per program, so no cross-warp step and no
  barriers): at each butterfly level a lane sends the half of its values it gives up and adds the
  half it keeps, so NP = 16 values cost 8 + 4 + 2 + 1 + 1 = 16 shuffles instead of 80, and lane l
  ends with state ``l % NP`` (``l + 32 i`` for NP > 32), which it stores. 32 SHFL and 550
  instructions per step, no BAR / STS / LDS. It needs ``shfl.sync`` / ``%laneid`` inline PTX and
  the row-per-lane layout (checked in the TTGIR: every blocked / linear layout of the kernel puts
  the 32 lanes along the channels), so on CPU tensors (the interpreter) it runs as "tile": its GPU
  path is checked only by the GPU tests. Per-block partials: dim / 32 blocks of (batch, L, NP).

All keep the contract: deterministic per-block / per-segment partials summed by ``torch.sum``.
Still open in all: 255 registers with spills (the B_t / C_t vectors of a tile are loaded twice,
recompute and adjoint, and the compiler hoists them), three exp2 per (d, n, t), and the tile-start
scratch (batch x dim x L x NP / 4 floats written and read once).
"""

from __future__ import annotations

import warnings

import torch
import triton
import triton.language as tl
from torch._library.triton import is_wrap_triton_enabled

from ssmscan.ops.common.launch_options import DEFAULT as DEFAULT_LAUNCH
from ssmscan.ops.common.launch_options import LaunchOptions
from ssmscan.ops.common.launch_plan import planned
from ssmscan.ops.selective_scan import shapes, triton_bwd_launch
from ssmscan.ops.selective_scan.layout_check import LaneLayoutError
from ssmscan.ops.selective_scan.plan import (
    DEFAULT,
    BackwardPlan,
    DeviceFacts,
    Policy,
    device_facts,
    plan_backward,
)
from ssmscan.ops.selective_scan.shapes import empty_backward_outputs
from ssmscan.ops.selective_scan.triton_bwd_split import _aligned
from ssmscan.ops.selective_scan.triton_common import (
    _bfly,
    _fold_chunk_sums,
    _sigmoid,
    _softplus,
    _tile_inputs,
    _tile_offsets,
    num_groups,
)
from ssmscan.ops.selective_scan.triton_fwd import _col


@triton.jit
def _state_step(h, b_A2, dt, dtu, p_B, t, L, NP: tl.constexpr):
    b_B = tl.load(p_B + t * NP, mask=t < L, other=0.0)
    return tl.exp2(dt[:, None] * b_A2) * h + dtu[:, None] * b_B[None, :]


@triton.jit
def _adjoint_only_step(G, b_A2, dt, dy, p_C, t, L, NP: tl.constexpr):
    """G = a_t (C_t dy_t + G): the adjoint step (Note [selective scan backward]) without the
    gradients."""
    b_C = tl.load(p_C + t * NP, mask=t < L, other=0.0)
    return tl.exp2(dt[:, None] * b_A2) * (G + b_C[None, :] * dy[:, None])


@triton.jit
def _lane_id(like):
    """%laneid of the thread holding each element of the int32 tensor ``like``."""
    return tl.inline_asm_elementwise("mov.u32 $0, %laneid;", "=r,r", [like], tl.int32, True, 1)


@triton.jit
def _rows_bfly(x, MASK: tl.constexpr, EMU: tl.constexpr):
    """Row ``d ^ MASK`` of x, the row of lane ``laneid ^ MASK`` in a one-warp block of 32 rows:
    compiled, ``shfl.sync.bfly`` (``_bfly``); EMU (the interpreter: no inline PTX) the same rows
    by ``tl.gather``."""
    if EMU:
        d = tl.arange(0, x.shape[0])[:, None] ^ MASK
        return tl.gather(x, tl.broadcast_to(d, x.shape), axis=0)
    return _bfly(x, MASK)


@triton.jit
def _warp_reduce_scatter(x, lane, BLOCK_D: tl.constexpr, K: tl.constexpr, EMU: tl.constexpr):
    """Sum of the (BLOCK_D, K) x over the 32 lanes of the (one) warp, scattered: returns
    (BLOCK_D, max(K // 32, 1)) where lane l holds the sums of columns n = 32 i + l (K >= 32) or
    n = l % K (K < 32). Note [selective scan backward tiles]."""
    for lvl in tl.static_range(5):
        if (1 << lvl) < K:
            a, b = tl.split(tl.reshape(x, (BLOCK_D, K >> (lvl + 1), 2)))  # even / odd columns
            hi = ((lane >> lvl) & 1)[:, None] == 1
            x = tl.where(hi, b, a) + _rows_bfly(tl.where(hi, a, b), 1 << lvl, EMU)
        else:
            x = x + _rows_bfly(x, 1 << lvl, EMU)
    return x


@triton.jit
def _store_block_sum(base, x, lane, m, NP: tl.constexpr, BLOCK_D: tl.constexpr, RS: tl.constexpr):
    """Store the sum over the block's channels of the (BLOCK_D, NP) x to base[0:NP] (if m): with
    RS one warp's reduce-scatter (``_warp_reduce_scatter``; RS 2: its shuffles emulated), else
    ``tl.sum``."""
    if RS:
        KR: tl.constexpr = NP // 32 if NP >= 32 else 1
        r = _warp_reduce_scatter(x, lane, BLOCK_D, NP, RS == 2)  # (BLOCK_D, KR)
        o_n = tl.arange(0, KR)[None, :] * 32 + lane[:, None]  # the state each lane holds
        tl.store(base + o_n, r, mask=m & (o_n < NP))
    else:
        tl.store(base + tl.arange(0, NP), tl.sum(x, axis=0), mask=m)


@triton.jit
def _tile_recompute(
    h,
    b_A2,
    dt,
    dtu,
    dy,
    p_B,
    p_C,
    dC0,
    lane,
    t,
    L,
    NP: tl.constexpr,
    BLOCK_D: tl.constexpr,
    RS: tl.constexpr,
):
    """One forward step inside the tile being differentiated, on (BLOCK_D,) columns taken from the
    tiles: h_t, sum_n C_t h_t and this block's dC_t partial; dC0 the scalar pointer to this
    block's partial dC at step 0."""
    m = t < L
    b_B = tl.load(p_B + t * NP, mask=m, other=0.0)
    b_C = tl.load(p_C + t * NP, mask=m, other=0.0)
    h = tl.exp2(dt[:, None] * b_A2) * h + dtu[:, None] * b_B[None, :]
    y = tl.sum(h * b_C[None, :], axis=1)
    _store_block_sum(dC0 + t * NP, h * dy[:, None], lane, m, NP, BLOCK_D, RS)
    return h, y


@triton.jit
def _tile_adjoint(
    G,
    h_prev,
    b_A2,
    dt,
    dtu,
    dy,
    p_B,
    p_C,
    dB0,
    lane,
    dA_acc,
    t,
    L,
    NP: tl.constexpr,
    BLOCK_D: tl.constexpr,
    RS: tl.constexpr,
):
    """Reverse step (Note [selective scan backward]): G = a_{t+1} g_{t+1} on entry, a_t g_t on
    exit; dA accumulated, the dB_t partial stored through ``_store_block_sum``."""
    m = t < L
    b_B = tl.load(p_B + t * NP, mask=m, other=0.0)
    b_C = tl.load(p_C + t * NP, mask=m, other=0.0)
    g = G + b_C[None, :] * dy[:, None]
    ga = g * tl.exp2(dt[:, None] * b_A2)
    q = ga * h_prev
    dA_acc += q * dt[:, None]
    qA = tl.sum(q * b_A2, axis=1)
    gB = tl.sum(g * b_B[None, :], axis=1)
    _store_block_sum(dB0 + t * NP, g * dtu[:, None], lane, m, NP, BLOCK_D, RS)
    return ga, dA_acc, qA, gB


@triton.jit
def _selective_scan_bwd_tile_kernel(
    dout,  # (batch, dim, L) gradient of out, u's dtype
    dlast,  # (batch, NP, dim) fp32 gradient of the last state, or None
    u,  # (batch, dim, L)
    delta,  # (batch, dim, L)
    A2t,  # (NP, dim) fp32, A * log2(e)
    Bt,  # (batch, G, L, NP) fp32
    Ct,  # (batch, G, L, NP) fp32
    Dv,  # (dim,) fp32 or None
    z,  # (batch, dim, L) or None
    delta_bias,  # (dim,) fp32 or None
    ckpt,  # (batch, NCK, NP, dim) fp32 state before each chunk, last entry the final state
    seg_adj,  # (batch, NSEG, NP, dim) fp32 adjoint entering each segment from the right, or None
    scratch,  # (batch, NSEG, CK // 4, NP, dim) fp32 tile-start states of the current chunk
    du,  # (batch, dim, L) out, u's dtype
    ddelta,  # (batch, dim, L) out, delta's dtype
    dz,  # (batch, dim, L) out, or None when z is None
    dAp,  # (batch, NSEG, NP, dim) fp32 per-(batch, segment) partial dA
    dBp,  # (dim // BLOCK_D, batch, L, NP) fp32 per-block partial dB
    dCp,  # (dim // BLOCK_D, batch, L, NP) fp32 per-block partial dC
    dDp,  # (batch, NSEG, dim) fp32 per-(batch, segment) partial dD, or None
    dbiasp,  # (batch, NSEG, dim) fp32 per-(batch, segment) partial ddelta_bias, or None
    dinit,  # (batch, NP, dim) fp32 gradient of the initial state
    dim,  # channels
    L,  # sequence length
    G,  # groups of B / C
    NCK,  # checkpoint entries = cdiv(L, CK) + 1
    SEG,  # chunks per segment (program axis 2)
    SOFTPLUS: tl.constexpr,
    NP: tl.constexpr,
    CK: tl.constexpr,
    BLOCK_D: tl.constexpr,
    HAS_D: tl.constexpr,
    HAS_Z: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_DLAST: tl.constexpr,
    HAS_SEG: tl.constexpr,  # L split into segments: seg_adj given
    # dB / dC by one warp's reduce-scatter (BLOCK_D == 32, one warp): 1 its shuffles, 2 their
    # emulation (the interpreter); 0 ``tl.sum``
    RS: tl.constexpr,
    PTX: tl.constexpr,  # inline PTX (``rcp``); else portable ``tl`` code
):
    """Note [selective scan backward] with Note [selective scan backward tiles]."""
    NT: tl.constexpr = CK // 4
    i_d = tl.program_id(0)
    i_b = tl.program_id(1).to(tl.int64)
    i_s = tl.program_id(2)
    NSEG = tl.num_programs(2)
    o_d = i_d * BLOCK_D + tl.arange(0, BLOCK_D)
    m_d = o_d < dim
    o_n = tl.arange(0, NP)
    o_t = tl.arange(0, 4)
    # (BLOCK_D, NP) offsets in the channel-contiguous layout; max hides dim's divisibility by 16
    # (one channel with all its states per thread, Note [selective scan thread layout])
    o_nd = o_n[None, :] * tl.maximum(dim, 1) + o_d[:, None]
    m_d2 = m_d[:, None]
    SZ = NP * dim  # one state-shaped entry

    b_A2 = tl.load(A2t + o_nd, mask=m_d2, other=0.0)
    b_D = tl.load(Dv + o_d, mask=m_d, other=0.0) if HAS_D else None
    b_bias = tl.load(delta_bias + o_d, mask=m_d, other=0.0) if HAS_BIAS else None

    row = (i_b * dim + o_d.to(tl.int64)) * L
    grp = (i_d * BLOCK_D) // (dim // G)
    bc = (i_b * G + grp) * L * NP + o_n
    p_B = Bt + bc
    p_C = Ct + bc
    part = (i_d * tl.num_programs(1) + i_b) * L * NP  # this block's rows of the partial buffers
    dB0 = dBp + part
    dC0 = dCp + part
    lane = _lane_id(o_d) if RS == 1 else o_d  # RS: the lane holding each channel
    p_ck = ckpt + i_b * NCK * SZ + o_nd
    i_bs = i_b * NSEG + i_s
    p_sc = scratch + i_bs * NT * SZ + o_nd

    if HAS_DLAST:
        G_adj = tl.load(dlast + i_b * SZ + o_nd, mask=m_d2, other=0.0)
    else:
        G_adj = tl.zeros((BLOCK_D, NP), dtype=tl.float32)
    if HAS_SEG:  # constexpr: seg_adj is None with one segment
        if i_s < NSEG - 1:
            G_adj = tl.load(seg_adj + i_bs * SZ + o_nd, mask=m_d2, other=0.0)
    # the sums over L: this chunk's (the _acc), then the segment's (Note [long sums])
    dA_acc = tl.zeros((BLOCK_D, NP), dtype=tl.float32)
    dD_acc = tl.zeros((BLOCK_D,), dtype=tl.float32)
    dbias_acc = tl.zeros((BLOCK_D,), dtype=tl.float32)
    dA_tot = tl.zeros((BLOCK_D, NP), dtype=tl.float32)
    dD_tot = tl.zeros((BLOCK_D,), dtype=tl.float32)
    dbias_tot = tl.zeros((BLOCK_D,), dtype=tl.float32)

    c0 = i_s * SEG
    c1 = tl.minimum(c0 + SEG, NCK - 1)  # entry NCK - 1 is the final state, not a chunk
    for cc in range(0, c1 - c0):
        c = c1 - 1 - cc
        t_beg = c * CK
        n_tiles = (tl.minimum(t_beg + CK, L) - t_beg + 3) // 4  # >= 1
        # chunk pass: tile-start states into the scratch (each thread writes and reads back only
        # its own channel's entries; the barriers guard against different store / load layouts)
        tl.debug_barrier()
        h = tl.load(p_ck + c * SZ, mask=m_d2, other=0.0)
        for k in range(0, n_tiles - 1):
            t0 = t_beg + 4 * k
            tl.store(p_sc + k * SZ, h, mask=m_d2)
            o_tt = t0 + o_t
            m = m_d[:, None] & (o_tt < L)[None, :]
            p = row[:, None] + o_tt[None, :]
            b_u = tl.load(u + p, mask=m, other=0.0).to(tl.float32)
            b_dt = tl.load(delta + p, mask=m, other=0.0).to(tl.float32)
            if HAS_BIAS:
                b_dt += b_bias[:, None]  # type: ignore[index]  # None only when the HAS_ flag is off
            if SOFTPLUS:
                b_dt = _softplus(b_dt)
            b_dt = tl.where(m, b_dt, 0.0)
            b_dtu = b_dt * b_u
            for j in tl.static_range(4):
                h = _state_step(
                    h, b_A2, _col(b_dt, o_t, j), _col(b_dtu, o_t, j), p_B, t0 + j, L, NP
                )
        tl.store(p_sc + (n_tiles - 1) * SZ, h, mask=m_d2)
        tl.debug_barrier()
        # tiles in reverse
        for kk in range(0, n_tiles):
            k = n_tiles - 1 - kk
            t0 = t_beg + 4 * k
            hs = tl.load(p_sc + k * SZ, mask=m_d2, other=0.0)
            m, p = _tile_offsets(row, m_d, o_t, t0, L)
            b_u, b_x, b_dt, b_do, b_z, sig_z, b_dy = _tile_inputs(
                u, delta, dout, z, m, p, b_bias, SOFTPLUS, HAS_Z, HAS_BIAS, PTX
            )
            b_dtu = b_dt * b_u
            dt0 = _col(b_dt, o_t, 0)
            dt1 = _col(b_dt, o_t, 1)
            dt2 = _col(b_dt, o_t, 2)
            dt3 = _col(b_dt, o_t, 3)
            dtu0 = _col(b_dtu, o_t, 0)
            dtu1 = _col(b_dtu, o_t, 1)
            dtu2 = _col(b_dtu, o_t, 2)
            dtu3 = _col(b_dtu, o_t, 3)
            dy0 = _col(b_dy, o_t, 0)
            dy1 = _col(b_dy, o_t, 1)
            dy2 = _col(b_dy, o_t, 2)
            dy3 = _col(b_dy, o_t, 3)
            h0, y0 = _tile_recompute(
                hs, b_A2, dt0, dtu0, dy0, p_B, p_C, dC0, lane, t0, L, NP, BLOCK_D, RS
            )
            h1, y1 = _tile_recompute(
                h0, b_A2, dt1, dtu1, dy1, p_B, p_C, dC0, lane, t0 + 1, L, NP, BLOCK_D, RS
            )
            h2, y2 = _tile_recompute(
                h1, b_A2, dt2, dtu2, dy2, p_B, p_C, dC0, lane, t0 + 2, L, NP, BLOCK_D, RS
            )
            _h3, y3 = _tile_recompute(
                h2, b_A2, dt3, dtu3, dy3, p_B, p_C, dC0, lane, t0 + 3, L, NP, BLOCK_D, RS
            )
            G_adj, dA_acc, qA3, gB3 = _tile_adjoint(
                G_adj,
                h2,
                b_A2,
                dt3,
                dtu3,
                dy3,
                p_B,
                p_C,
                dB0,
                lane,
                dA_acc,
                t0 + 3,
                L,
                NP,
                BLOCK_D,
                RS,
            )
            G_adj, dA_acc, qA2, gB2 = _tile_adjoint(
                G_adj,
                h1,
                b_A2,
                dt2,
                dtu2,
                dy2,
                p_B,
                p_C,
                dB0,
                lane,
                dA_acc,
                t0 + 2,
                L,
                NP,
                BLOCK_D,
                RS,
            )
            G_adj, dA_acc, qA1, gB1 = _tile_adjoint(
                G_adj,
                h0,
                b_A2,
                dt1,
                dtu1,
                dy1,
                p_B,
                p_C,
                dB0,
                lane,
                dA_acc,
                t0 + 1,
                L,
                NP,
                BLOCK_D,
                RS,
            )
            G_adj, dA_acc, qA0, gB0 = _tile_adjoint(
                G_adj,
                hs,
                b_A2,
                dt0,
                dtu0,
                dy0,
                p_B,
                p_C,
                dB0,
                lane,
                dA_acc,
                t0,
                L,
                NP,
                BLOCK_D,
                RS,
            )
            # (BLOCK_D, 4) tiles of sum_n q A2, sum_n g B, y
            c_t = o_t[None, :]
            b_qA = tl.where(c_t == 0, qA0[:, None], qA1[:, None])
            b_qA = tl.where(c_t == 2, qA2[:, None], b_qA)
            b_qA = tl.where(c_t == 3, qA3[:, None], b_qA)
            b_gB = tl.where(c_t == 0, gB0[:, None], gB1[:, None])
            b_gB = tl.where(c_t == 2, gB2[:, None], b_gB)
            b_gB = tl.where(c_t == 3, gB3[:, None], b_gB)
            b_ddt = b_qA * 0.6931471805599453 + b_u * b_gB  # A2 -> A
            b_du = b_dt * b_gB
            if HAS_D:
                b_du += b_D[:, None] * b_dy  # type: ignore[index]  # None only when the HAS_ flag is off
                dD_acc += tl.sum(b_dy * b_u, axis=1)
            if SOFTPLUS:
                b_ddt = b_ddt * _sigmoid(b_x, PTX)
            b_ddt = tl.where(m, b_ddt, 0.0)
            dbias_acc += tl.sum(b_ddt, axis=1)
            tl.store(du + p, b_du.to(du.dtype.element_ty), mask=m)
            tl.store(ddelta + p, b_ddt.to(ddelta.dtype.element_ty), mask=m)
            if HAS_Z:
                b_y = tl.where(c_t == 0, y0[:, None], y1[:, None])
                b_y = tl.where(c_t == 2, y2[:, None], b_y)
                b_y = tl.where(c_t == 3, y3[:, None], b_y)
                if HAS_D:
                    b_y += b_D[:, None] * b_u  # type: ignore[index]  # None only when the HAS_ flag is off
                b_dz = b_do * b_y * sig_z * (1.0 + b_z * (1.0 - sig_z))
                tl.store(dz + p, b_dz.to(dz.dtype.element_ty), mask=m)
        # the chunk's sums into the segment's (Note [long sums])
        dA_tot, dD_tot, dbias_tot, dA_acc, dD_acc, dbias_acc = _fold_chunk_sums(
            dA_tot, dD_tot, dbias_tot, dA_acc, dD_acc, dbias_acc
        )
    if i_s == 0:
        tl.store(dinit + i_b * SZ + o_nd, G_adj, mask=m_d2)
    tl.store(dAp + i_bs * SZ + o_nd, dA_tot, mask=m_d2)
    if HAS_D:
        tl.store(dDp + i_bs * dim + o_d, dD_tot, mask=m_d)
    if HAS_BIAS:
        tl.store(dbiasp + i_bs * dim + o_d, dbias_tot, mask=m_d)


@triton.jit
def _selective_scan_bwd_local_kernel(
    dout,  # (batch, dim, L) gradient of out
    delta,  # (batch, dim, L)
    A2t,  # (NP, dim) fp32
    Ct,  # (batch, G, L, NP) fp32
    z,  # (batch, dim, L) or None
    delta_bias,  # (dim,) fp32 or None
    seg_loc,  # (batch, NSEG, NP, dim) fp32 out: a_{t_beg} g_{t_beg} of the segment from zero
    seg_dt,  # (batch, NSEG, dim) fp32 out: sum of dt over the segment
    dim,  # channels
    L,  # sequence length
    G,  # groups of B / C
    NC,  # chunks = cdiv(L, CK)
    SEG,  # chunks per segment
    SOFTPLUS: tl.constexpr,
    NP: tl.constexpr,
    CK: tl.constexpr,
    BLOCK_D: tl.constexpr,
    HAS_Z: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    PTX: tl.constexpr,  # inline PTX (``rcp``); else portable ``tl`` code
):
    """Pass 1 of the backward (Note [selective scan segments]): the adjoint alone, reversed over
    one segment from a zero adjoint; it needs no states."""
    i_d = tl.program_id(0)
    i_b = tl.program_id(1).to(tl.int64)
    i_s = tl.program_id(2)
    NSEG = tl.num_programs(2)
    o_d = i_d * BLOCK_D + tl.arange(0, BLOCK_D)
    m_d = o_d < dim
    o_n = tl.arange(0, NP)
    o_nd = o_n[None, :] * dim + o_d[:, None]
    b_A2 = tl.load(A2t + o_nd, mask=m_d[:, None], other=0.0)
    b_bias = tl.load(delta_bias + o_d, mask=m_d, other=0.0) if HAS_BIAS else None
    row = (i_b * dim + o_d.to(tl.int64)) * L
    grp = (i_d * BLOCK_D) // (dim // G)
    p_C = Ct + (i_b * G + grp) * L * NP + o_n
    t_beg = i_s * SEG * CK
    t_end = tl.minimum(tl.minimum(i_s * SEG + SEG, NC) * CK, L)
    n_tiles = (t_end - t_beg + 3) // 4
    G_adj = tl.zeros((BLOCK_D, NP), dtype=tl.float32)
    dt_sum = tl.zeros((BLOCK_D,), dtype=tl.float32)
    for kk in range(0, n_tiles):
        t0 = t_beg + 4 * (n_tiles - 1 - kk)
        for jj in tl.static_range(4):
            t = t0 + 3 - jj
            m = m_d & (t < t_end)
            b_dt = tl.load(delta + row + t, mask=m, other=0.0).to(tl.float32)
            b_dy = tl.load(dout + row + t, mask=m, other=0.0).to(tl.float32)
            if HAS_BIAS:
                b_dt += b_bias
            if SOFTPLUS:
                b_dt = _softplus(b_dt)
            b_dt = tl.where(m, b_dt, 0.0)
            if HAS_Z:
                b_z = tl.load(z + row + t, mask=m, other=0.0).to(tl.float32)
                b_dy = b_dy * b_z * _sigmoid(b_z, PTX)
            dt_sum += b_dt
            G_adj = _adjoint_only_step(G_adj, b_A2, b_dt, b_dy, p_C, t, t_end, NP)
    i_bs = i_b * NSEG + i_s
    tl.store(seg_loc + i_bs * (NP * dim) + o_nd, G_adj, mask=m_d[:, None])
    tl.store(seg_dt + i_bs * dim + o_d, dt_sum, mask=m_d)


@triton.jit
def _selective_scan_bwd_carry_kernel(
    A2t,  # (NP, dim) fp32; (dim, NP) if DN
    dlast,  # (batch, NP, dim) fp32 or None; (batch, dim, NP) if DN
    seg_loc,  # (batch, NSEG, NP, dim) fp32 local segment-start adjoints; (.., dim, NP) if DN
    seg_dt,  # (batch, NSEG, dim) fp32 sums of dt
    seg_adj,  # (batch, NSEG, NP, dim) fp32 out: adjoint entering each segment from the right
    dim,  # channels
    NSEG,  # segments
    NP: tl.constexpr,
    BLOCK_D: tl.constexpr,
    HAS_DLAST: tl.constexpr,
    DN: tl.constexpr = False,  # every state-shaped buffer (dim, NP): the split / lane kernels'
):
    """Pass 2 of the backward: G_{s-1} = exp(A sum dt_s) G_s + local_s, from the last segment."""
    i_d = tl.program_id(0)
    i_b = tl.program_id(1).to(tl.int64)
    o_d = i_d * BLOCK_D + tl.arange(0, BLOCK_D)
    m_d = o_d < dim
    o_n = tl.arange(0, NP)
    if DN:
        o_nd = o_d[:, None] * NP + o_n[None, :]
    else:
        o_nd = o_n[None, :] * dim + o_d[:, None]
    SZ = NP * dim
    b_A2 = tl.load(A2t + o_nd, mask=m_d[:, None], other=0.0)
    if HAS_DLAST:
        G_adj = tl.load(dlast + i_b * SZ + o_nd, mask=m_d[:, None], other=0.0)
    else:
        G_adj = tl.zeros((BLOCK_D, NP), dtype=tl.float32)
    for ss in range(0, NSEG - 1):
        s = NSEG - 1 - ss
        p = (i_b * NSEG + s) * SZ + o_nd
        b_loc = tl.load(seg_loc + p, mask=m_d[:, None], other=0.0)
        b_sdt = tl.load(seg_dt + (i_b * NSEG + s) * dim + o_d, mask=m_d, other=0.0)
        G_adj = tl.exp2(b_sdt[:, None] * b_A2) * G_adj + b_loc
        tl.store(seg_adj + p - SZ, G_adj, mask=m_d[:, None])


def _backward_without_steps(
    dlast_state: torch.Tensor | None,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    delta_bias: torch.Tensor | None,
    initial_state: torch.Tensor | None,
    dA: torch.Tensor,
    optional_grads: list[torch.Tensor],
) -> None:
    """The gradients of a call with L = 0 or batch = 0: dA, dD, ddelta_bias zero (empty sums),
    the (batch, dim, N) initial state's gradient dlast (the state is never updated); du,
    ddelta, dz, dB, dC have no elements. (No kernel launches: the lane kernels assume steps.)"""
    rest = iter(optional_grads)
    dA.zero_()
    if D is not None:
        next(rest).zero_()
    if z is not None:
        next(rest)  # no elements
    if delta_bias is not None:
        next(rest).zero_()
    if initial_state is not None:
        dinit = next(rest)
        if dlast_state is not None:
            dinit.copy_(dlast_state)
        else:
            dinit.zero_()


def plan_for(u: torch.Tensor, A: torch.Tensor, B: torch.Tensor,
             tensors: tuple[torch.Tensor | None, ...], policy: Policy = DEFAULT,
             facts: DeviceFacts | None = None) -> BackwardPlan:  # fmt: skip
    """The planner's plan for these inputs on their device (``tensors``: those whose 16-byte
    alignment the split kernels' layouts assume)."""
    batch, dim, L = u.shape
    N, G = int(A.shape[1]), int(num_groups(B))  # specialized under symbolic sizes
    facts = facts or device_facts(u.device)
    aligned = not facts.compiled or all(_aligned(t) for t in tensors if t is not None)
    return plan_backward(batch, dim, L, N, G, isinstance(L, int), aligned, facts,
                         is_wrap_triton_enabled(), policy, shapes.CHECKPOINT_LEN)  # fmt: skip


@planned
def backward(
    dout: torch.Tensor,
    dlast_state: torch.Tensor | None,
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    delta_bias: torch.Tensor | None,
    initial_state: torch.Tensor | None,
    checkpoints: torch.Tensor,
    delta_softplus: bool,
    *,
    options: LaunchOptions = DEFAULT_LAUNCH,
) -> tuple[
    torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, list[torch.Tensor]
]:
    """The gradients, fresh (``shapes.empty_backward_outputs``), from the kernels; in eager
    through recorded launches (Note [eager launch plans]) unless ``options`` says otherwise."""
    grads = empty_backward_outputs(u, delta, A, B, C, D, z, delta_bias, initial_state)
    launch(
        dout, dlast_state, u, delta, A, B, C, D, z, delta_bias, initial_state, checkpoints,
        delta_softplus, *grads[:5], grads[5], options=options,
    )  # fmt: skip
    return grads


def launch(
    dout: torch.Tensor,
    dlast_state: torch.Tensor | None,
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    delta_bias: torch.Tensor | None,
    initial_state: torch.Tensor | None,
    checkpoints: torch.Tensor,
    delta_softplus: bool,
    du: torch.Tensor,
    ddelta: torch.Tensor,
    dA: torch.Tensor,
    dB: torch.Tensor,
    dC: torch.Tensor,
    optional_grads: list[torch.Tensor],
    plan: BackwardPlan | None = None,
    options: LaunchOptions = DEFAULT_LAUNCH,
) -> None:
    """Run the backward into the preallocated gradients (``shapes.empty_backward_outputs``) by
    ``plan`` (the planner's if None), launched as ``options`` says; ``optional_grads`` holds dD, dz, ddelta_bias,
    dinitial_state for the optional inputs given. A lane kernel that fails its layout check is
    replaced by the plan's fallback (checked before its first launch; every gradient is
    written again)."""
    args = (dout, dlast_state, u, delta, A, B, C, D, z, delta_bias, initial_state, checkpoints)
    grads = (du, ddelta, dA, dB, dC, optional_grads)
    if u.dtype == torch.float64:
        host = [t.cpu() if t is not None else None for t in args]
        from ssmscan.ops.selective_scan import cpu  # noqa: F401  (registers the op)

        res = torch.ops.ssmscan.selective_scan_bwd_cpu(*host, delta_softplus)
        for dst, src in zip((du, ddelta, dA, dB, dC, *optional_grads), (*res[:5], *res[5])):
            dst.copy_(src)
        return
    if u.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(
            f"ssmscan selective_scan Triton kernels take float32/16, bfloat16 or float64 u; got {u.dtype}"
        )
    batch, _dim, L = u.shape
    if isinstance(L, int) and isinstance(batch, int) and L * batch == 0:
        # no steps (or no rows): nothing to sum, the state passes through (dinit = dlast)
        _backward_without_steps(dlast_state, D, z, delta_bias, initial_state, dA, optional_grads)
        return
    if plan is None:
        plan = plan_for(u, A, B, (dout, u, delta, D, z, delta_bias, checkpoints, du, ddelta,
                                  *optional_grads))  # fmt: skip
    try:
        triton_bwd_launch.run(plan, *args, delta_softplus, *grads, options)
    except LaneLayoutError as e:
        if plan.fallback is None:
            raise
        warnings.warn(f"{e}; this call runs the split backward kernels", stacklevel=2)
        triton_bwd_launch.run(plan.fallback, *args, delta_softplus, *grads, options)
