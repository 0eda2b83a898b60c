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
launcher sums the partials with ``torch.sum``. With L split into segments (Note [selective scan
segments]) a local adjoint pass and a carry pass first give each segment its entering adjoint.

Note [selective scan backward tiles]
------------------------------------
``BWD_VARIANT`` picks the main kernel; read them with ``benchmarks/selective_scan/sass_report.py
--bwd`` (sm_90, per time step of the reverse-tile loop, (8, 4096, 2048, 16) fp32, real config):

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

import math
import warnings
from typing import Any

import torch
import triton
import triton.language as tl
from torch._library.triton import is_wrap_triton_enabled

from ssmscan.ops.common.host_math import cdiv
from ssmscan.ops.common.launch_plan import planned
from ssmscan.ops.common.triton_launch import launcher
from ssmscan.ops.selective_scan import triton_bwd_lane, triton_bwd_split, triton_common, triton_fwd
from ssmscan.ops.selective_scan.shapes import (
    CHECKPOINT_LEN,
    empty_backward_outputs,
    num_checkpoints,
)
from ssmscan.ops.selective_scan.triton_common import (
    TILE_T,
    _bfly,
    _fold_chunk_sums,
    _sigmoid,
    _softplus,
    _tile_inputs,
    _tile_offsets,
    as_f32,
    block_channels,
    num_groups,
    pad_states,
    prep_A,
    prep_BC,
    prep_BC_lane,
    segments,
)
from ssmscan.ops.selective_scan.triton_fwd import _col
from ssmscan.ops.selective_scan.triton_fwd_lane import (
    LaneLayoutError,
    _selective_scan_bwd_lane_states_kernel,
    check_lane_layout,
    lane_geometry,
    padded_steps,
)

LN2 = math.log(2.0)


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
def _warp_reduce_scatter(x, lane, BLOCK_D: tl.constexpr, K: tl.constexpr):
    """Sum of the (BLOCK_D, K) x over the 32 lanes of the (one) warp, scattered: returns
    (BLOCK_D, max(K // 32, 1)) where lane l holds the sums of columns n = 32 i + l (K >= 32) or
    n = l % K (K < 32). Note [selective scan backward tiles]."""
    for lvl in tl.static_range(5):
        if (1 << lvl) < K:
            a, b = tl.split(tl.reshape(x, (BLOCK_D, K >> (lvl + 1), 2)))  # even / odd columns
            hi = ((lane >> lvl) & 1)[:, None] == 1
            x = tl.where(hi, b, a) + _bfly(tl.where(hi, a, b), 1 << lvl)
        else:
            x = x + _bfly(x, 1 << lvl)
    return x


@triton.jit
def _store_block_sum(base, x, lane, m, NP: tl.constexpr, BLOCK_D: tl.constexpr, RS: tl.constexpr):
    """Store the sum over the block's channels of the (BLOCK_D, NP) x to base[0:NP] (if m): with
    RS one warp's reduce-scatter (``_warp_reduce_scatter``), else ``tl.sum``."""
    if RS:
        KR: tl.constexpr = NP // 32 if NP >= 32 else 1
        r = _warp_reduce_scatter(x, lane, BLOCK_D, NP)  # (BLOCK_D, KR)
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
    RS: tl.constexpr,  # dB / dC by one warp's reduce-scatter (BLOCK_D == 32, one warp; GPU only)
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
    lane = _lane_id(o_d) if RS else o_d  # RS: the lane holding each channel
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
                u, delta, dout, z, m, p, b_bias, SOFTPLUS, HAS_Z, HAS_BIAS
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
                b_ddt = b_ddt * _sigmoid(b_x)
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
                b_dy = b_dy * b_z * _sigmoid(b_z)
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


@triton.jit
def _sum_partials_group(p, j0, stride, m, NBG, U: tl.constexpr):
    """Partials j0 .. j0 + U - 1 of a (BLOCK_L, NP) tile (those past NBG masked: not read)."""
    xs = ()
    for i in tl.static_range(U):
        x = tl.load(p + (j0 + i) * stride, mask=m & (j0 + i < NBG), other=0.0)
        xs = xs + (x,)  # type: ignore[assignment]  # noqa: RUF005  (Triton tuples)
    return xs


@triton.jit
def _sum_rows_small(
    lin, nprog, which, rows, dAp, dA, dDp, dD, dbp, dbias, n_A, dim, HAS_A: tl.constexpr,
    HAS_D: tl.constexpr, HAS_BIAS: tl.constexpr,
):  # fmt: skip
    """The finish kernel's programs for dA (which 2), dD (3), ddelta_bias (4): out[o] = the sum
    of p[r, o] over the rows in order, 512 elements a program and step, the programs striding
    over the outputs."""
    BLOCK: tl.constexpr = 512
    if which == 2:
        if HAS_A:
            _sum_rows(lin, nprog, rows, dAp, dA, n_A, BLOCK)
    elif which == 3:
        if HAS_D:
            _sum_rows(lin, nprog, rows, dDp, dD, dim, BLOCK)
    else:
        if HAS_BIAS:
            _sum_rows(lin, nprog, rows, dbp, dbias, dim, BLOCK)


@triton.jit
def _sum_rows(lin, nprog, rows, p, out, n, BLOCK: tl.constexpr):
    lin = lin.to(tl.int64)  # lin * BLOCK overflows int32 on grids of 4M programs
    for o0 in range(lin * BLOCK, n, nprog.to(tl.int64) * BLOCK):
        o = o0 + tl.arange(0, BLOCK)
        m = o < n
        acc = tl.zeros((BLOCK,), dtype=tl.float32)
        q = p + o  # row r at q + r * n, stepped (64-bit pointer arithmetic)
        for _r in range(0, rows):
            acc += tl.load(q, mask=m, other=0.0)
            q += n
        tl.store(out + o, acc.to(out.dtype.element_ty), mask=m)


@triton.jit
def _selective_scan_bwd_sum_partials_kernel(
    partB,  # (G * NBG, batch, L, NP) fp32: the per-block dB partials
    partC,  # (G * NBG, batch, L, NP) fp32: the per-block dC partials
    dB,  # (batch, G, N, L) out, B's dtype
    dC,  # (batch, G, N, L) out, C's dtype
    NBG,  # channel blocks per group
    batch,
    L,
    G,
    rows,  # (batch x segment) rows of the small partials below
    dAp,  # (rows, dim * NP) fp32 partial dA (NP == N: dA's layout), or None
    dA,  # (dim * NP,) out, or None
    dDp,  # (rows, dim) fp32 partial dD, or None
    dD,  # (dim,) out, or None
    dbp,  # (rows, dim) fp32 partial ddelta_bias, or None
    dbias,  # (dim,) out, or None
    n_A,  # dim * NP
    dim,
    N: tl.constexpr,
    NP: tl.constexpr,
    BLOCK_L: tl.constexpr,
    U: tl.constexpr,  # partials loaded per group
    HAS_A: tl.constexpr,
    HAS_D: tl.constexpr,
    HAS_BIAS: tl.constexpr,
):
    """dB / dC (program axis 1: which = 0 / 1) = the sum of their per-block partials over a
    group's blocks, in fixed order (deterministic), written transposed to (N, L) and cast: what
    the launcher's ``torch.sum`` + transposing copy do, in one launch for both
    (``FINISH_KERNEL``); the programs of which = 2 / 3 / 4 sum dA / dD / ddelta_bias over their
    (batch, segment) rows the same way (``_sum_rows_small``), the launches of three more
    ``torch.sum`` saved.

    A pure stream (the partials are nblk = dim / 8 times the gradients' size: 1.07 GB at (8,
    4096, 2048, 16)), so what sets its speed is the bytes in flight per thread: the partials
    come in groups of U loads, the next group loading while the current one is added (ptxas
    otherwise puts each add right behind its load). H200: 1.07 GB in 249 us, 4.3 TB/s."""
    # program axis 0: (batch x group, step block), so batch x G is not bound by the grid's
    # 65535 on axis 1; axis 1: which
    nl = tl.cdiv(L, BLOCK_L)
    pid = tl.program_id(0)
    i_l = pid % nl
    i_bg = pid // nl
    which = tl.program_id(1)
    if which >= 2:  # dA, dD, ddelta_bias: sums over the rows, all programs of the axis
        _sum_rows_small(
            pid,
            tl.num_programs(0),
            which,
            rows,
            dAp,
            dA,
            dDp,
            dD,
            dbp,
            dbias,
            n_A,
            dim,
            HAS_A,
            HAS_D,
            HAS_BIAS,
        )
        return
    b = (i_bg // G).to(tl.int64)
    g = i_bg % G
    o_l = i_l * BLOCK_L + tl.arange(0, BLOCK_L)
    o_n = tl.arange(0, NP)
    m = (o_l < L)[:, None]
    stride = (b * 0 + batch) * L * NP  # one block's partial, int64 (batch may be a constexpr 1)
    if which == 0:
        part = partB
    else:
        part = partC
    p = part + g.to(tl.int64) * NBG * stride + b * L * NP + o_l[:, None] * NP + o_n[None, :]
    acc = tl.zeros((BLOCK_L, NP), dtype=tl.float32)
    nxt = _sum_partials_group(p, 0, stride, m, NBG, U)
    for j0 in range(U, NBG + U, U):
        cur = nxt
        nxt = _sum_partials_group(p, j0, stride, m, NBG, U)
        t = cur[0]
        for i in tl.static_range(1, U):
            t += cur[i]
        acc += t
    # stored (NP, BLOCK_L): consecutive steps on consecutive lanes (the gradients' last dimension)
    off = ((b * G + g) * N + o_n[:, None]) * L + o_l[None, :]
    mo = (o_l < L)[None, :] & (o_n < N)[:, None]
    acc_t = tl.trans(acc)
    if which == 0:
        tl.store(dB + off, acc_t.to(dB.dtype.element_ty), mask=mo)
    else:
        tl.store(dC + off, acc_t.to(dC.dtype.element_ty), mask=mo)


# Which main kernel ``launch`` uses (Note [selective scan backward tiles]); a module constant so
# the benchmark can time them side by side: "tile" reads and writes (BLOCK_D, 4) tiles with one
# channel per thread and sums dB / dC with ``tl.sum``, "tile_rs" sums them by a one-warp
# reduce-scatter (BLOCK_D 32, one warp per program; on CPU tensors, i.e. under the interpreter,
# it runs as "tile").
BWD_VARIANTS = {
    "tile": _selective_scan_bwd_tile_kernel,
    "tile_rs": _selective_scan_bwd_tile_kernel,
    # Note [selective scan backward split] (triton_bwd_split): where ``applies`` (16 states,
    # L % 16 == 0 on the GPU, ...), "tile_rs" otherwise
    "split": triton_bwd_split._selective_scan_bwd_split_kernel,
    # Note [selective scan backward lanes] (triton_bwd_lane): the split kernel's path and
    # conditions with the lane layout; the default (falls back to "split" when its layout check
    # fails)
    "lane": triton_bwd_lane._selective_scan_bwd_lane_kernel,
}
# H200, fwd+bwd ms with the library's split policy (benchmarks/RESULTS.md): 2026-11-30, tile_rs /
# tile / column (the deleted previous kernel) = 6.69 / 10.23 / 9.74 at 8x4096x2048 fp32, 2.86 /
# 3.58 / 3.75 at 16x1536x1024 fp32, 9.60 / 10.86 / 10.75 at 1x1024x65536 fp32; 2026-12-01,
# split / tile_rs (same process, CUDA graphs) = 5.57 / 6.14 and 4.84 / 5.75 (bf16) at
# 8x4096x2048, 2.18 / 2.60 and 1.93 / 2.47 at 16x1536x1024, 0.82 / 0.99 and 0.77 / 0.95 at
# 1x1536x4096, 7.60 / 9.21 and 6.84 / 8.28 at 1x1024x65536: split fastest at every row, and
# correct on the GPU in fp32 / bf16 / fp16 (benchmarks/selective_scan/gpu_errors.py). 2026-12-01
# (seventh session), eager op, lane (with its next-tile prefetch) / split: 4.02 / 4.14 fp32 and
# 3.73 / 3.93 bf16 at 8x4096x2048, 1.62 / 1.66 and 1.51 / 1.58 at 16x1536x1024 (the lane kernel
# alone 2.36 vs 2.56 ms bf16 at 8x4096x2048); correct on the GPU in fp32 / bf16 / fp16: the default.
BWD_VARIANT = "lane"
# the segments' local pass on the lane forward's tiles (``triton_bwd_lane``) on the split path; a
# module constant so that the benchmark can time the 2-D one beside it
LANE_LOCAL = True
# after the lane local pass, with at most this many segments, the lane main kernel folds the
# segments to its right itself (up to NSEG - 1 steps, four segments' loads at a time:
# ``triton_fwd_lane.fold_segments``) instead of reading the carry kernel's adjoints: one launch
# fewer. Beyond it the fold's wait before each program's walk costs more than the launch (H200,
# 2026-12-02, forward+backward under CUDA graphs, fold / carry kernel: (1, 1536, 4096, 16), 16
# segments, 0.475 / 0.479 ms bf16 and 0.501 / 0.503 fp32; (1, 1024, 65536, 16), 64 segments,
# 4.558 / 4.489 bf16 but 4.828 / 4.909 fp32). 0: the carry kernel always.
FOLD_MAX_SEGMENTS = 16
# with the lane local pass, the lane states kernel runs it (``ADJ``: a program per segment, the
# local adjoint summed forward on the states' exponentials) instead of a launch of its own; a
# module constant so that the benchmark can time both
STATES_ADJ = True
# extra launch options of that kernel: 128 registers (bf16 compiles to 164 uncapped, no spills at
# 128; H200, 2026-12-02, forward+backward under CUDA graphs, capped / uncapped / the local pass's
# own kernel: (1, 1536, 4096, 16) bf16 0.460 / 0.463 / 0.478 ms, fp32 0.494 / 0.503 / 0.504;
# (1, 1024, 65536, 16) bf16 4.375 / 4.557 / 4.513, fp32 4.737 / 4.825 / 4.927)
STATES_OPTIONS: dict[str, int] = {"maxnreg": 128}
# the dB / dC partial sums (and the transposing copy into the gradients) by one Triton kernel
# (``_selective_scan_bwd_sum_partials_kernel``) instead of torch.sum + copy per gradient: fewer
# launches (host time at batch 1) and one pass (H200, 2026-12-01, bf16 per call: 249 vs 276 us
# at (8, 4096, 2048, 16), 100 vs 126 at (16, 1536, 1024, 16), both at ~4.3 TB/s of partials)
FINISH_KERNEL = True
# dB / dC stay per-block partials summed in fixed order by the finish kernel (deterministic): fp32
# atomics straight into one sum per group in the lane main kernel (relaxed ``red.global.add``,
# 2 per step and warp) were tried and made that kernel 0.48 ms slower at (8, 4096, 2048, 16) bf16
# (2.34 -> 2.82), more than the 0.25 ms the partials' sum takes (H200, 2026-12-01)

# the finish kernel's partials per load group, and values per program and partial (8 x 512
# ran the partials at 4.3 TB/s, H200)
SUM_UNROLL = 8
SUM_VALUES = 512


def variant_constexprs(kernel, on_gpu: bool, block_d: int, warps: int) -> dict[str, int | bool]:
    """Compile-time constants of ``BWD_VARIANT``'s kernel beyond the shared ones."""
    return dict(RS=BWD_VARIANT == "tile_rs" and on_gpu and block_d == 32 and warps == 1)


def bwd_block_channels(batch: int, dim: int, G: int) -> tuple[int, int]:
    """(BLOCK_D, num_warps) of the backward: the forward's ``block_channels``; "tile_rs" one warp
    of 32 channels (its reduce-scatter sums over one warp) where the groups allow."""
    if BWD_VARIANT == "tile_rs" and (G == 1 or (dim // G) % 32 == 0):
        return 32, 1
    return block_channels(batch, dim, G)


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


def plan_knobs() -> tuple:
    """The module settings the backward's launches depend on (the forward's too: it uses the
    forward's blocks and lane tiles); Note [eager launch plans]."""
    bl, bs = triton_bwd_lane, triton_bwd_split
    return (
        *triton_fwd.plan_knobs(), BWD_VARIANT, LANE_LOCAL, FOLD_MAX_SEGMENTS, STATES_ADJ,
        tuple(STATES_OPTIONS.items()), FINISH_KERNEL, SUM_UNROLL, SUM_VALUES, CHECKPOINT_LEN,
        TILE_T, tuple((k, id(v)) for k, v in BWD_VARIANTS.items()), bl.LANE_KL, bl.PREFETCH,
        bl.PREFETCH_BC, tuple(bl.OPTIONS.items()), bs.SPLIT_NP, bs.SPLIT_TT, bs.SPLIT_BLOCK_D,
    )  # fmt: skip


@planned(plan_knobs)
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
) -> tuple[
    torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, list[torch.Tensor]
]:
    """The gradients, fresh (``shapes.empty_backward_outputs``), from the kernels; in eager
    through recorded plans (Note [eager launch plans])."""
    grads = empty_backward_outputs(u, delta, A, B, C, D, z, delta_bias, initial_state)
    launch(
        dout, dlast_state, u, delta, A, B, C, D, z, delta_bias, initial_state, checkpoints,
        delta_softplus, *grads[:5], grads[5],
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
) -> None:
    """Run the backward into the preallocated gradients (``shapes.empty_backward_outputs``);
    ``optional_grads`` holds dD, dz, ddelta_bias, dinitial_state for the optional inputs given."""
    global BWD_VARIANT  # "lane" -> "split" when the lane kernel fails its layout check
    if u.dtype == torch.float64:
        # no float64 Triton path: the float64 C kernel on host copies (correct, not fast)
        from ssmscan.ops.selective_scan import cpu  # noqa: F401  (registers the op)

        host = [
            t.cpu() if t is not None else None
            for t in (
                dout,
                dlast_state,
                u,
                delta,
                A,
                B,
                C,
                D,
                z,
                delta_bias,
                initial_state,
                checkpoints,
            )
        ]
        res = torch.ops.ssmscan.selective_scan_bwd_cpu(*host, delta_softplus)
        for dst, src in zip((du, ddelta, dA, dB, dC, *optional_grads), (*res[:5], *res[5])):
            dst.copy_(src)
        return
    if u.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(
            f"ssmscan selective_scan Triton kernels take float32/16, bfloat16 or float64 u; got {u.dtype}"
        )
    batch, dim, L = u.shape
    if isinstance(L, int) and isinstance(batch, int) and L * batch == 0:
        # no steps (or no rows): nothing to sum, the state passes through (dinit = dlast)
        _backward_without_steps(dlast_state, D, z, delta_bias, initial_state, dA, optional_grads)
        return
    N = int(A.shape[1])  # specialized under symbolic sizes, as in the forward's ``launch``
    NP = pad_states(N)
    G = int(num_groups(B))
    assert CHECKPOINT_LEN % TILE_T == 0 and CHECKPOINT_LEN % triton_bwd_split.SPLIT_TT == 0
    # the local / carry passes (segments) always run with the tile kernels' blocks
    block_d, warps = bwd_block_channels(batch, dim, G)
    nblk = cdiv(dim, block_d)
    # the split kernel's path (states kernel, 8-channel warps), its main kernel the lane one for
    # "lane" (Note [selective scan backward lanes])
    split = BWD_VARIANT in ("split", "lane") and triton_bwd_split.applies(
        N,
        dim,
        G,
        L,
        (dout, u, delta, D, z, delta_bias, checkpoints, du, ddelta, *optional_grads),
        u.is_cuda,
    )
    dev = u.device
    f32 = torch.float32
    rest = iter(optional_grads)
    dD = next(rest) if D is not None else None
    dz = next(rest) if z is not None else None
    dbias = next(rest) if delta_bias is not None else None
    dinit_out = next(rest) if initial_state is not None else None

    NCK = checkpoints.shape[2]
    assert NCK == num_checkpoints(L), (NCK, L)
    if split:  # the forward's density: 8 channels per warp, so the forward's split target
        nseg, seg = segments(
            batch * cdiv(dim, triton_bwd_split.SPLIT_BLOCK_D),
            NCK - 1,
            triton_common.FWD_TARGET_WARPS,
        )
    else:
        nseg, seg = segments(batch * nblk * warps, NCK - 1)
    A2 = prep_A(A, NP)  # (dim, NP): the split kernels'
    TT = triton_bwd_split.SPLIT_TT
    KL, TPL = lane_geometry(NP)
    LP = padded_steps(L, TT)  # steps of the lane kernels' B / C copies
    # the segments' local pass on the lane forward's tiles too (split path, lane geometry)
    lane_local = (
        LANE_LOCAL and split and nseg > 1 and triton_fwd.FWD_VARIANT == "lane" and KL * TPL == TT
    )
    # (NP, dim): the tile kernels' and the segments' 2-D local / carry passes'
    A2t = A2.t().contiguous() if not split or (nseg > 1 and not lane_local) else None
    plain: dict[int, torch.Tensor] = {}

    def plain_BC(i: int) -> torch.Tensor:
        """(batch, G, L, NP) fp32 copy of B (i = 0) or C (1), the 2-D kernels' layout, made on
        first use (the lane path needs none: host time of batch-1 calls)."""
        if i not in plain:
            plain[i] = prep_BC((B, C)[i], batch, NP)
        return plain[i]

    lane_bc: list[tuple[torch.Tensor, torch.Tensor]] = []

    def lane_BC() -> tuple[torch.Tensor, torch.Tensor]:
        """B's and C's time-padded copies for the lane kernels, both in one launch, on first use."""
        if not lane_bc:
            lane_bc.append(prep_BC_lane(B, C, batch, NP, LP))
        return lane_bc[0]

    dout_c = dout.contiguous()
    u_c = u.contiguous()
    delta_c = delta.contiguous()
    z_c = z.contiguous() if z is not None else None
    bias_c = as_f32(delta_bias) if delta_bias is not None else None

    def states_major(x: torch.Tensor) -> torch.Tensor:
        """(..., dim, N) -> (..., NP, dim) fp32, zero-padded: the kernels' state layout."""
        y = torch.zeros((*x.shape[:-2], NP, dim), dtype=f32, device=dev)
        y[..., :N, :].copy_(x.transpose(-1, -2))
        return y

    # (dim, NP): the split / lane kernels' state layout
    dlast_dn = (
        torch.nn.functional.pad(dlast_state.to(f32), (0, NP - N)).contiguous()
        if split and dlast_state is not None
        else None
    )
    # (NP, dim): the tile kernels' and the 2-D carry pass's layout
    need_t = not split or (nseg > 1 and not lane_local)
    dlast_t = states_major(dlast_state) if need_t and dlast_state is not None else None
    seg_adj = None
    # the split path's tile-start states (the states kernel's output; made with the local pass
    # when STATES_ADJ, else in the split branch below)
    tstates: torch.Tensor | None = None
    ck: torch.Tensor | None = None
    if split:
        # the forward's checkpoints as they are ((batch, dim, NCK, N) fp32), padded when N < NP
        ck = checkpoints.contiguous()
        if NP != N:
            ck = torch.nn.functional.pad(ck, (0, NP - N))
    if lane_local:
        # Note [selective scan segments] on the lane tiles, every state buffer (dim, NP)
        seg_loc = torch.empty((batch, nseg, dim, NP), dtype=f32, device=dev)
        seg_dt = torch.empty((batch, nseg, dim), dtype=f32, device=dev)
        sbd, sw = triton_fwd.fwd_block_channels(batch, dim, G, NP, KL)
        kernel = launcher(
            _selective_scan_bwd_lane_states_kernel
            if STATES_ADJ
            else triton_bwd_lane._selective_scan_bwd_lane_local_kernel,
            check_lane_layout(KL),
        )
        try:
            if STATES_ADJ:  # the states kernel, a program per segment, does the local pass
                assert ck is not None  # made above on the split path
                # tstates is set once launched: after a layout failure the split branch makes it
                ts = torch.empty((batch, dim, cdiv(L, TT), NP), dtype=f32, device=dev)
                kernel[(cdiv(dim, sbd), batch, nseg)](
                    u_c, delta_c, A2, lane_BC()[0], bias_c, ck, ts, dim, L, LP, G, NCK,
                    SOFTPLUS=delta_softplus, NP=NP, CK=CHECKPOINT_LEN,
                    HAS_BIAS=delta_bias is not None, BLOCK_D=sbd, KL=KL, TPL=TPL,
                    dout=dout_c, z=z_c, Ct=lane_BC()[1], seg_loc=seg_loc, seg_dt=seg_dt,
                    SEG=seg, HAS_Z=z is not None, ADJ=True,
                    BCAST_TILE=triton_fwd.bcast_tile(u.dtype), num_warps=sw, **STATES_OPTIONS,
                )  # fmt: skip
                tstates = ts
            else:  # no program for segment 0 (nothing reads its adjoint)
                kernel[(cdiv(dim, sbd), batch, nseg - 1)](
                    dout_c,
                    delta_c,
                    A2,
                    lane_BC()[1],
                    z_c,
                    bias_c,
                    seg_loc,
                    seg_dt,
                    dim,
                    L,
                    LP,
                    G,
                    NCK - 1,
                    seg,
                    SOFTPLUS=delta_softplus,
                    NP=NP,
                    CK=CHECKPOINT_LEN,
                    BLOCK_D=sbd,
                    KL=KL,
                    TPL=TPL,
                    HAS_Z=z is not None,
                    HAS_BIAS=delta_bias is not None,
                    num_warps=sw,
                )
        except LaneLayoutError as e:  # checked before its first launch: nothing written
            triton_fwd.FWD_VARIANT = "tile"
            warnings.warn(f"{e}; using the 2-D forward kernels from now on", stacklevel=2)
            lane_local = False
            A2t = A2.t().contiguous()
            dlast_t = states_major(dlast_state) if dlast_state is not None else None
    if nseg > 1 and not lane_local:
        # Note [selective scan segments]: the 2-D local adjoint pass, (NP, dim) buffers
        seg_loc = torch.empty((batch, nseg, NP, dim), dtype=f32, device=dev)
        seg_dt = torch.empty((batch, nseg, dim), dtype=f32, device=dev)
        launcher(_selective_scan_bwd_local_kernel)[(nblk, batch, nseg)](
            dout_c,
            delta_c,
            A2t,
            plain_BC(1),
            z_c,
            bias_c,
            seg_loc,
            seg_dt,
            dim,
            L,
            G,
            NCK - 1,
            seg,
            SOFTPLUS=delta_softplus,
            NP=NP,
            CK=CHECKPOINT_LEN,
            BLOCK_D=block_d,
            HAS_Z=z is not None,
            HAS_BIAS=delta_bias is not None,
            num_warps=warps,
        )
    carry_block = (nblk, block_d, warps)

    def carried() -> torch.Tensor:
        """The carry pass from the right, in the local pass's layout: the adjoint entering each
        segment (the lane main kernel after the lane local pass carries itself instead)."""
        nblk, block_d, warps = carry_block
        seg_adj = torch.empty_like(seg_loc)
        launcher(_selective_scan_bwd_carry_kernel)[(nblk, batch)](
            A2 if lane_local else A2t,
            dlast_dn if lane_local else dlast_t,
            seg_loc,
            seg_dt,
            seg_adj,
            dim,
            nseg,
            NP=NP,
            BLOCK_D=block_d,
            HAS_DLAST=dlast_state is not None,
            DN=lane_local,
            num_warps=warps,
        )
        return seg_adj

    # the lane main kernel folds the segments to its right itself (one launch fewer)
    carry_in_main = (
        lane_local and nseg <= FOLD_MAX_SEGMENTS and BWD_VARIANT == "lane" and KL * TPL == TT
    )
    if nseg > 1 and not carry_in_main:
        seg_adj = carried()
    # the state-shaped buffers read / written once: (NP, dim) for the tile kernels, (dim, NP)
    # for the split kernel (Note [selective scan backward split])
    dlast_main, seg_adj_main = dlast_t, seg_adj
    lane_main: tuple | None = (
        None  # the lane main kernel's (kernel, B, C, (LP,), constexprs, check)
    )
    state_shape: tuple[int, int] = (NP, dim)
    if split:
        block_d, warps = triton_bwd_split.SPLIT_BLOCK_D, 1
        nblk = cdiv(dim, block_d)
        state_shape = (dim, NP)
        dlast_main = dlast_dn
        if seg_adj is not None and not lane_local:  # the 2-D carry pass's (NP, dim)
            seg_adj_main = seg_adj.transpose(-1, -2).contiguous()
        A2_main = A2
        # every tile's start state, all chunks at once (Note [selective scan backward split]),
        # unless the local pass made them
        made = tstates is not None
        if tstates is None:
            tstates = torch.empty((batch, dim, cdiv(L, TT), NP), dtype=f32, device=dev)
        states_args: list[Any] = [u_c, delta_c, A2_main, None, bias_c, ck, tstates, dim, L, G, NCK]
        states_consts = dict(
            SOFTPLUS=delta_softplus,
            NP=NP,
            CK=CHECKPOINT_LEN,
            HAS_BIAS=delta_bias is not None,
        )
        lane = triton_fwd.FWD_VARIANT == "lane" and KL * TPL == TT
        if lane and not made:  # the lane forward's tiles (Note [selective scan forward lanes])
            sbd, sw = triton_fwd.fwd_block_channels(batch, dim, G, NP, KL)
            grid = (cdiv(dim, sbd), batch, NCK - 1)
            kernel = launcher(_selective_scan_bwd_lane_states_kernel, check_lane_layout(KL))
            args = list(states_args)
            args[3] = lane_BC()[0]  # time-padded
            args.insert(9, LP)
            try:
                kernel[grid](
                    *args, **states_consts, BLOCK_D=sbd, KL=KL, TPL=TPL, dout=None, z=None,
                    Ct=None, seg_loc=None, seg_dt=None, SEG=1, HAS_Z=False, ADJ=False,
                    BCAST_TILE=triton_fwd.bcast_tile(u.dtype), num_warps=sw,
                )  # fmt: skip
            except LaneLayoutError as e:  # checked before its first launch: nothing written
                triton_fwd.FWD_VARIANT = "tile"
                warnings.warn(f"{e}; using the 2-D forward kernels from now on", stacklevel=2)
                lane = False
        if not lane and not made:
            sbd, sw = triton_fwd.fwd_block_channels(batch, dim, G, NP)
            launcher(triton_bwd_split._selective_scan_bwd_states_kernel)[
                (cdiv(dim, sbd), batch, NCK - 1)
            ](*states_args[:3], plain_BC(0), *states_args[4:], **states_consts, BLOCK_D=sbd, TT=TT,
              num_warps=sw)  # fmt: skip
        states: tuple[torch.Tensor | None, ...] = (tstates, seg_adj_main)
        kernel = triton_bwd_split._selective_scan_bwd_split_kernel
        extra: dict[str, int | bool] = dict(TT=TT, EMU=not u.is_cuda)
        if BWD_VARIANT == "lane" and KL * TPL == TT:  # Note [selective scan backward lanes]
            lane_main = (
                triton_bwd_lane._selective_scan_bwd_lane_kernel,
                *lane_BC(),
                (LP,),
                dict(
                    KL=KL,
                    TPL=TPL,
                    EMU=not u.is_cuda,
                    PREFETCH=triton_bwd_lane.PREFETCH,
                    # not when traced: Note [traced kernels' inline asm]
                    PREFETCH_BC=triton_bwd_lane.prefetch_bc(is_wrap_triton_enabled()),
                    CARRY=carry_in_main,
                    **triton_bwd_lane.OPTIONS,
                ),
                triton_bwd_lane.check_bwd_lane_layout(),
                # with CARRY: the local pass's adjoints and dt sums (or None: one segment)
                (tstates, seg_loc, seg_dt) if carry_in_main else (*states, None),
            )
    else:
        assert A2t is not None  # prepared for the tile kernels above
        A2_main = A2t
        states = (
            states_major(checkpoints.transpose(1, 2)),  # (batch, NCK, NP, dim)
            seg_adj_main,
            torch.empty((batch, nseg, CHECKPOINT_LEN // 4, NP, dim), dtype=f32, device=dev),
        )
        kernel = BWD_VARIANTS["tile_rs" if BWD_VARIANT in ("split", "lane") else BWD_VARIANT]
        extra = variant_constexprs(kernel, u.is_cuda, block_d, warps)
    dAp = torch.empty((batch, nseg, *state_shape), dtype=f32, device=dev)
    # dB's and dC's partials, two allocations: views of one buffer written by the main kernel
    # cost two copies of each under torch.compile (functionalization scatters them back into the
    # base: 145 us of a 460-us batch-1 bf16 step, H200, 2026-12-02)
    dBp = torch.empty((nblk, batch, L, NP), dtype=f32, device=dev)
    dCp = torch.empty((nblk, batch, L, NP), dtype=f32, device=dev)
    dDp = torch.empty((batch, nseg, dim), dtype=f32, device=dev) if D is not None else None
    dbp = torch.empty((batch, nseg, dim), dtype=f32, device=dev) if delta_bias is not None else None
    dinit = torch.empty((batch, *state_shape), dtype=f32, device=dev)

    def run_main(kernel: Any, Bm: torch.Tensor, Cm: torch.Tensor, LP: tuple[int, ...], extra: dict,
                 check: Any, states: tuple) -> None:  # fmt: skip
        launcher(kernel, check)[(nblk, batch, nseg)](
            dout_c,
            dlast_main,
            u_c,
            delta_c,
            A2_main,
            Bm,
            Cm,
            as_f32(D) if D is not None else None,
            z_c,
            bias_c,
            *states,
            du,
            ddelta,
            dz,
            dAp,
            dBp,
            dCp,
            dDp,
            dbp,
            dinit,
            dim,
            L,
            *LP,
            G,
            NCK,
            seg,
            SOFTPLUS=delta_softplus,
            NP=NP,
            CK=CHECKPOINT_LEN,
            BLOCK_D=block_d,
            HAS_D=D is not None,
            HAS_Z=z is not None,
            HAS_BIAS=delta_bias is not None,
            HAS_DLAST=dlast_state is not None,
            HAS_SEG=nseg > 1,
            num_warps=warps,
            **extra,
        )

    if lane_main is None:
        run_main(kernel, plain_BC(0), plain_BC(1), (), extra, None, states)
    else:
        try:
            run_main(*lane_main)
        except LaneLayoutError as e:  # checked before its first launch: nothing written
            BWD_VARIANT = "split"
            warnings.warn(f"{e}; using the split backward kernel from now on", stacklevel=2)
            if carry_in_main and nseg > 1:  # the split kernel reads the carried adjoints
                states = (tstates, carried())
            run_main(kernel, plain_BC(0), plain_BC(1), (), extra, None, states)
    # the partial sums, each one kernel where the layouts allow (the host time of these small
    # launches is what bounds batch-1 calls): with FINISH_KERNEL all in one
    finish = FINISH_KERNEL and dB.is_contiguous() and dC.is_contiguous()
    in_finish_A = finish and split and NP == N and dA.is_contiguous()  # (dim, NP): dA's layout
    if not in_finish_A:
        if split and NP == N:
            torch.sum(dAp, (0, 1), out=dA)
        elif split:
            dA.copy_(dAp.sum((0, 1))[:, :N])
        else:
            dA.copy_(dAp.sum((0, 1))[:N].t())
    # (nblk, batch, L, NP) -> (G, nblk / G, batch, L, NP) -> (batch, G, N, L), one cast-and-
    # transpose copy into the gradient
    if finish:
        # 4 partial values per thread and load (one 16-byte load), SUM_UNROLL loads a group
        block_l = max(1, SUM_VALUES // NP)
        launcher(_selective_scan_bwd_sum_partials_kernel)[(cdiv(L, block_l) * batch * G, 5)](
            dBp,
            dCp,
            dB,
            dC,
            nblk // G,
            batch,
            L,
            G,
            batch * nseg,
            dAp,
            dA if in_finish_A else None,
            dDp,
            dD,
            dbp,
            dbias,
            dim * NP,
            dim,
            N=N,
            NP=NP,
            BLOCK_L=block_l,
            U=SUM_UNROLL,
            HAS_A=in_finish_A,
            HAS_D=dD is not None,
            HAS_BIAS=dbias is not None,
            num_warps=4,
        )
    else:
        for grad, part in ((dB, dBp), (dC, dCp)):
            red = part.view(G, nblk // G, batch, L, NP).sum(1)[..., :N].permute(1, 0, 3, 2)
            grad.view(batch, G, N, L).copy_(red)
        if dD is not None:
            assert dDp is not None  # both are allocated iff D is given
            torch.sum(dDp, (0, 1), out=dD)
        if dbias is not None:
            assert dbp is not None  # both are allocated iff delta_bias is given
            torch.sum(dbp, (0, 1), out=dbias)
    if dinit_out is not None:
        dinit_out.copy_(dinit[:, :, :N] if split else dinit[:, :N].transpose(1, 2))
