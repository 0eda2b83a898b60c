"""Triton kernels of ``ssmscan::ssd_scan_bwd`` (CUDA), and their launcher.

Note [SSD Triton backward]: README.md's Note [SSD chunked backward], recomputing rather than
storing (the forward saves only its inputs), in four or five launches:

1. the states walk (``triton_walk``, Note [SSD Triton walking backward]): time steps,
   log-decays ``cs`` in two float32 parts (Note [SSD two-float log-decays]) and the state
   entering each chunk, at the backward's chunk;
2. C·Bᵀ once per chunk and group (``triton_fwd.chunk_cb``, where the plan says so);
3. the dstates walk, backwards over the chunks with the state's gradient on chip:
   ``dS_c = k_c dS_{c+1} + sum_j w_j g_j C_jᵀ`` (``g = dout silu(z)``, the gradient of y;
   ``w_j = exp(cs_j)`` masked), writing ``dS_{c+1}`` (the gradient of each chunk's own state),
   the partial sums of ``dk_c = sum dS_{c+1} ∘ S_c``, and ``dinitial_states = dS_0``;
4. ``_ssd_scan_bwd_dx_kernel``, one program per (chunk, batch x head), looping over headdim
   blocks (and dstate blocks inside): ``dX = Mᵀ g + e ∘ (B dS_{c+1}ᵀ)`` with
   ``M = C Bᵀ ∘ decay`` and ``X = dt x``; dx, dz, the partial sums of dD; and the gradient of
   the log-decays' increments ``a_k = dt_k A``. The decays ``decay_ij = exp(cs_i - cs_j)`` and
   ``e_j = exp(cs_last - cs_j)`` come from the two-float ``cs`` (``_split_log_decays``), whose
   differences keep their digits where float32 cumulative sums reach thousands. ``a_k``'s
   gradient sums the terms that contain it, each once:

       da_k = sum_{i>=k, j<k} (g Xᵀ ∘ M)_ij + sum_{j<k} X_j · (e ∘ B dS_{c+1}ᵀ)_j
              + sum_{i>=k} g_i · (w ∘ C S_cᵀ)_i + dk_c k_c

   (``g Xᵀ`` from a second loop over headdim blocks, re-reading x, dout and z: accumulated in the
   first, its (CHUNK, CHUNK) tile spilled registers; ``w``'s sum a reverse cumsum). The first
   sum: for float32 inputs a reverse ``tl.cumsum`` over i of the tile, then a masked row sum,
   ``e``'s term entering it as row i = last, each da_k a sum over its own pairs; for 16-bit
   inputs (``plan.da_sums``) telescoped into the reverse cumsum of the tile's row sums less its
   column sums, strictly below the diagonal (the diagonal's terms, the largest, would cancel),
   which is cheaper than the tile's cumsum but a difference of sums: float32 keeps it to about
   3e-4 of dA at strong decays. (Taking the first sum from 5, which forms each head's ``g Xᵀ``
   for ``dCB`` anyway, dropped this kernel's second loop but was slower: RESULTS.) Then
   ``dA += sum da dt``, ``d(dt) = da A + sum_p dX x`` through the clamp and the softplus;
5. ``_ssd_scan_bwd_dbc_kernel``, one program per (chunk, batch x group x split of its heads,
   dstate block; ``plan.dbc_heads`` heads a split, the whole dstate up to 128 for 16-bit
   inputs), looping over the split's heads: ``dC = sum_h w ∘ (g S) + dCB B``,
   ``dB = sum_h (e ∘ X) dS_{c+1} + dCBᵀ C`` with ``dCB = sum_h (g Xᵀ) ∘ decay`` (the decays as
   in 4; one sum over the split's heads inside the program, and over the splits by
   ``torch.sum`` of their float32 partials: no atomics, deterministic).

dA, dD and ddt_bias are sums of per-program partials taken with ``torch.sum`` (deterministic).

Note [SSD two-float log-decays]: within a chunk ``cs_i = sum_{k<=i} dt_k A`` reaches thousands
at strong decays (dt of a few units, A near -24), and a float32 difference ``cs_i - cs_j`` of
such sums keeps no digit of a decay near 1. The backward's states walk sums the float32
increments in float64 and stores ``cs`` rounded to float32 with the remainder ``lo`` (float32):
``cs_i - cs_j`` is then ``(cs_i - cs_j) + (lo_i - lo_j)``, the first difference rounded once to
half an ulp of itself (exact where the two are within a factor two, Sterbenz), the second tiny:
a decay's relative error about float32's epsilon times its own log, however large cs grows.
The decays are then elementwise, where summing each pair's own increments took a ``tl.cumsum``
over the (CHUNK, CHUNK) tile per head and kernel (the forward's output kernel still does:
RESULTS).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ssmscan.ops.common.host_math import cdiv, next_pow2
from ssmscan.ops.common.triton_launch import launcher
from ssmscan.ops.ssd_scan import triton_walk
from ssmscan.ops.ssd_scan.common import segment_ids
from ssmscan.ops.ssd_scan.plan import SSDPlan, plan_for
from ssmscan.ops.ssd_scan.shapes import empty_backward_outputs
from ssmscan.ops.ssd_scan.triton_fwd import (
    _cast,
    _chunk_cb,
    _dot,
    _last,
    _load_cb,
    _pair_decay,
    _segments,
    _softplus,
    chunk_cb,
    dt_flags,
    precision,
)


@triton.jit
def _split_log_decays(b_cs, b_lo, CHUNK: tl.constexpr):
    """(CHUNK, CHUNK) ``[i, j] = cs_i - cs_j`` for j < i (0 on and above the diagonal) and
    (CHUNK,) ``cs_last - cs_j``, from cs in two float32 parts (Note [SSD two-float
    log-decays])."""
    o_i = tl.arange(0, CHUNK)
    b_ld = (b_cs[:, None] - b_cs[None, :]) + (b_lo[:, None] - b_lo[None, :])
    b_end = (_last(b_cs, CHUNK) - b_cs) + (_last(b_lo, CHUNK) - b_lo)
    return tl.where(o_i[:, None] > o_i[None, :], b_ld, 0.0), b_end


@triton.jit
def _ssd_scan_bwd_dx_kernel(
    x,  # (batch, L, nheads, headdim)
    z,  # (batch, L, nheads, headdim) gate (HAS_Z)
    dout,  # (batch, L, nheads, headdim)
    dt,  # (batch, L, nheads) raw time step
    dt_bias,  # (nheads,) (HAS_BIAS)
    A,  # (nheads,)
    Dv,  # (nheads, headdim) or (nheads,) skip (HAS_D)
    B,  # (batch, L, ngroups, dstate)
    C,  # (batch, L, ngroups, dstate)
    seg,  # (batch, L) int64 segment ids (HAS_SEG)
    dtp,  # (batch, nheads, NC * CHUNK) fp32 time step
    cs,  # (batch, nheads, NC * CHUNK) fp32 cumsum of dt * A within each chunk
    cslo,  # (batch, nheads, NC * CHUNK) fp32 low parts of cs
    states,  # (batch, NC, nheads, headdim, dstate) fp32 (or x's dtype: plan.bwd_states_16)
    # state entering each chunk
    dstates,  # (batch, NC, nheads, headdim, dstate) states' dtype: gradient of each chunk's own
    # state
    dk,  # (batch, nheads, NC, NBLK) fp32 partial sums of the carries' gradients
    cb,  # (batch, ngroups, NC, CHUNK, CHUNK) fp32 C Bᵀ of each chunk and group (HAS_CB)
    dx,  # (batch, L, nheads, headdim) output, x's dtype
    dz,  # (batch, L, nheads, headdim) output, z's dtype (HAS_Z)
    ddt,  # (batch, L, nheads) fp32 output: gradient of the raw time step
    dD,  # (batch, NC, nheads, headdim) fp32 output: partial sums of g x (HAS_D)
    dA,  # (batch, nheads, NC) fp32 output: partial sums of da dt
    L,  # time steps
    H,  # nheads
    P,  # headdim
    G,  # ngroups
    N,  # dstate
    NC,  # chunks
    NBLK,  # partial sums per carry in dk
    dt_min,  # clamp of the time step (HAS_MIN)
    dt_max,  # (HAS_MAX)
    SOFTPLUS: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_MIN: tl.constexpr,
    HAS_MAX: tl.constexpr,
    HAS_D: tl.constexpr,
    D_PER_HEAD: tl.constexpr,  # D is (nheads,)
    HAS_Z: tl.constexpr,
    HAS_SEG: tl.constexpr,
    HAS_CB: tl.constexpr,  # read C Bᵀ from cb instead of computing it
    CHUNK: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,  # next_pow2(NBLK)
    PRECISION: tl.constexpr,
    F32_DOT: tl.constexpr,  # matmul operands in float32 (at PRECISION); else in x's dtype
    STATE_DOT_16: tl.constexpr,  # states, dstates, B and C all in one 16-bit dtype: C Sᵀ and
    # B dSᵀ multiply them as they are (exact products, float32 sums), whatever F32_DOT says
    EMULATE: tl.constexpr,  # the interpreter: _dot emulates the tensor cores' rounding
    DA_SUMS: tl.constexpr,  # da's decay-matrix term by row and column sums (plan.da_sums)
):
    """dx, dz, d(dt) and the partials of dD, dA of one chunk and head (Note [SSD Triton
    backward], 4)."""
    i_c = tl.program_id(0).to(tl.int64)
    i_bh = tl.program_id(1).to(tl.int64)
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
    o_hq = i_bh * NC * CHUNK + i_c * CHUNK + o_i
    b_cs = tl.load(cs + o_hq)
    b_d = tl.load(dtp + o_hq)
    cs_last = _last(b_cs, CHUNK)
    b_ld, b_end = _split_log_decays(b_cs, tl.load(cslo + o_hq), CHUNK)
    b_w = tl.exp(b_cs)
    b_e = tl.exp(b_end)
    b_k = tl.exp(cs_last)
    b_s = o_i  # unused without segments
    if HAS_SEG:
        b_s, s_prev, s_last = _segments(seg, i_b, i_c, o_t, L, CHUNK)
        b_w = tl.where(b_s == s_prev, b_w, 0.0)
        b_e = tl.where(b_s == s_last, b_e, 0.0)
        b_k = tl.where(s_last == s_prev, b_k, 0.0)
    b_decay = _pair_decay(b_ld, b_s, CHUNK, HAS_SEG)
    if HAS_CB:
        b_cb = _load_cb(cb, i_b, i_g, i_c, G, NC, CHUNK)
    else:
        b_cb = _chunk_cb(B, C, i_b, i_g, o_t, m_t, L, G, N, CHUNK, BLOCK_N, PRECISION, F32_DOT,
                         EMULATE)  # fmt: skip
    b_M = _cast(b_cb * b_decay, DOT, EMULATE)
    b_Mt = tl.trans(b_M)
    o_k = tl.arange(0, BLOCK_K)
    b_dk = tl.sum(tl.load(dk + (i_bh * NC + i_c) * NBLK + o_k, mask=o_k < NBLK, other=0.0), 0)
    b_tstart = tl.zeros((CHUNK,), dtype=tl.float32)
    b_tend = tl.zeros((CHUNK,), dtype=tl.float32)
    b_ddt = tl.zeros((CHUNK,), dtype=tl.float32)
    o_state = ((i_b * NC + i_c) * H + i_h) * P * N
    for p0 in range(0, P, BLOCK_P):
        o_p = p0 + tl.arange(0, BLOCK_P)
        m_p = o_p < P
        o_x = ((i_b * L + o_t[:, None]) * H + i_h) * P + o_p[None, :]
        m_x = m_t[:, None] & m_p[None, :]
        b_x = tl.load(x + o_x, mask=m_x, other=0.0).to(tl.float32)
        b_X = b_x * b_d[:, None]
        b_do = tl.load(dout + o_x, mask=m_x, other=0.0).to(tl.float32)
        if HAS_Z:
            b_z = tl.load(z + o_x, mask=m_x, other=0.0).to(tl.float32)
            b_sig = tl.sigmoid(b_z)
            b_g = b_do * b_z * b_sig
        else:
            b_g = b_do
        b_off = tl.zeros((CHUNK, BLOCK_P), dtype=tl.float32)
        b_dxs = tl.zeros((CHUNK, BLOCK_P), dtype=tl.float32)
        for n0 in range(0, N, BLOCK_N):
            o_n = n0 + tl.arange(0, BLOCK_N)
            m_n = o_n < N
            o_bc = ((i_b * L + o_t[:, None]) * G + i_g) * N + o_n[None, :]
            m_bc = m_t[:, None] & m_n[None, :]
            o_st = o_state + o_p[None, :] * N + o_n[:, None]  # (BLOCK_N, BLOCK_P)
            m_st = m_n[:, None] & m_p[None, :]
            if STATE_DOT_16:
                b_C = tl.load(C + o_bc, mask=m_bc, other=0.0)
                b_B = tl.load(B + o_bc, mask=m_bc, other=0.0)
                b_St = tl.load(states + o_st, mask=m_st, other=0.0)
                b_dSt = tl.load(dstates + o_st, mask=m_st, other=0.0)
            else:
                b_C = tl.load(C + o_bc, mask=m_bc, other=0.0).to(DOT)
                b_B = tl.load(B + o_bc, mask=m_bc, other=0.0).to(DOT)
                b_St = _cast(tl.load(states + o_st, mask=m_st, other=0.0).to(tl.float32), DOT,
                             EMULATE)  # fmt: skip
                b_dSt = _cast(tl.load(dstates + o_st, mask=m_st, other=0.0).to(tl.float32),
                              DOT, EMULATE)  # fmt: skip
            b_off += _dot(b_C, b_St, PRECISION, EMULATE)
            b_dxs += _dot(b_B, b_dSt, PRECISION, EMULATE)
        b_dxs = b_dxs * b_e[:, None]
        b_off = b_off * b_w[:, None]
        b_Xd = _cast(b_X, DOT, EMULATE)
        b_gd = _cast(b_g, DOT, EMULATE)
        b_y = b_off + _dot(b_M, b_Xd, PRECISION, EMULATE)
        if HAS_D:
            if D_PER_HEAD:
                b_Dp = tl.load(Dv + i_h).to(tl.float32) + tl.zeros((BLOCK_P,), tl.float32)
            else:
                b_Dp = tl.load(Dv + i_h * P + o_p, mask=m_p, other=0.0).to(tl.float32)
        if HAS_Z:
            b_yz = b_y
            if HAS_D:
                b_yz = b_y + b_Dp[None, :] * b_x
            b_dz = b_do * b_yz * b_sig * (1.0 + b_z * (1.0 - b_sig))
            tl.store(dz + o_x, b_dz.to(dz.dtype.element_ty), mask=m_x)
        b_dX = _dot(b_Mt, b_gd, PRECISION, EMULATE) + b_dxs
        b_tstart += tl.sum(b_g * b_off, 1)
        b_tend += tl.sum(b_X * b_dxs, 1)
        b_ddt += tl.sum(b_dX * b_x, 1)
        b_dx = b_dX * b_d[:, None]
        if HAS_D:
            b_dx += b_g * b_Dp[None, :]
            o_dD = ((i_b * NC + i_c) * H + i_h) * P + o_p
            tl.store(dD + o_dD, tl.sum(b_g * b_x, 0), mask=m_p)
        tl.store(dx + o_x, b_dx.to(dx.dtype.element_ty), mask=m_x)
    b_gx = tl.zeros((CHUNK, CHUNK), dtype=tl.float32)  # g Xᵀ
    for p0 in range(0, P, BLOCK_P):
        o_p = p0 + tl.arange(0, BLOCK_P)
        o_x = ((i_b * L + o_t[:, None]) * H + i_h) * P + o_p[None, :]
        m_x = m_t[:, None] & (o_p < P)[None, :]
        b_X = tl.load(x + o_x, mask=m_x, other=0.0).to(tl.float32) * b_d[:, None]
        b_g = tl.load(dout + o_x, mask=m_x, other=0.0).to(tl.float32)
        if HAS_Z:
            b_z = tl.load(z + o_x, mask=m_x, other=0.0).to(tl.float32)
            b_g = b_g * b_z * tl.sigmoid(b_z)
        b_gx += _dot(
            _cast(b_g, DOT, EMULATE), tl.trans(_cast(b_X, DOT, EMULATE)), PRECISION, EMULATE
        )
    # da_k, the gradient of the k-th increment of cs, sums the terms that contain it: the decay
    # matrix's over the pairs j < k <= i (w_end's term is the last row's, i = CHUNK - 1),
    # w_start's over i >= k, the carry's always
    if DA_SUMS:
        # the decay matrix's term telescoped: with T = g Xᵀ ∘ M strictly below the diagonal,
        # sum_{i>=k, j<k} T_ij = sum_{m>=k} (sum_{j<m} T_mj - sum_{i>m} T_im), two reductions
        # and a (CHUNK,) cumsum instead of a (CHUNK, CHUNK) one; a difference of row and column
        # sums, which float32 keeps to about 3e-4 of dA at strong decays (16-bit inputs only)
        b_T = tl.where(o_i[:, None] > o_i[None, :], b_gx * b_M.to(tl.float32), 0.0)
        b_da = tl.cumsum(tl.sum(b_T, 1) - tl.sum(b_T, 0), 0, reverse=True)
        b_da += tl.cumsum(b_tend, 0) - b_tend  # w_end's: sum_{j<k} tend_j
    else:
        # each da_k a sum over its own pairs: no difference of large sums
        b_dlog = b_gx * b_M.to(tl.float32)
        b_dlog += tl.where(o_i[:, None] == CHUNK - 1, b_tend[None, :], 0.0)
        b_dlog = tl.cumsum(b_dlog, 0, reverse=True)  # [k, j]: sum over i >= k
        b_da = tl.sum(tl.where(o_i[None, :] < o_i[:, None], b_dlog, 0.0), 1)  # j < k
    b_da += tl.cumsum(b_tstart, 0, reverse=True) + b_dk * b_k
    tl.store(dA + i_bh * NC + i_c, tl.sum(b_da * b_d, 0))
    b_dd = b_da * tl.load(A + i_h).to(tl.float32) + b_ddt
    # through the clamp and the softplus
    b_pre = tl.load(dt + (i_b * L + o_t) * H + i_h, mask=m_t, other=0.0).to(tl.float32)
    if HAS_BIAS:
        b_pre += tl.load(dt_bias + i_h).to(tl.float32)
    b_post = b_pre
    if SOFTPLUS:
        b_post = _softplus(b_pre)
    if HAS_MIN:
        b_dd = tl.where(b_post < dt_min, 0.0, b_dd)
    if HAS_MAX:
        b_dd = tl.where(b_post > dt_max, 0.0, b_dd)
    if SOFTPLUS:
        b_dd = tl.where(b_pre <= 20.0, b_dd * tl.sigmoid(b_pre), b_dd)
    tl.store(ddt + (i_b * L + o_t) * H + i_h, b_dd, mask=m_t)


@triton.jit
def _ssd_scan_bwd_dbc_kernel(
    x,  # (batch, L, nheads, headdim)
    z,  # (batch, L, nheads, headdim) gate (HAS_Z)
    dout,  # (batch, L, nheads, headdim)
    B,  # (batch, L, ngroups, dstate)
    C,  # (batch, L, ngroups, dstate)
    seg,  # (batch, L) int64 segment ids (HAS_SEG)
    dtp,  # (batch, nheads, NC * CHUNK) fp32 time step
    cs,  # (batch, nheads, NC * CHUNK) fp32 cumsum of dt * A within each chunk
    cslo,  # (batch, nheads, NC * CHUNK) fp32 low parts of cs
    states,  # (batch, NC, nheads, headdim, dstate) fp32 (or x's dtype: plan.bwd_states_16)
    # state entering each chunk
    dstates,  # (batch, NC, nheads, headdim, dstate) states' dtype: gradient of each chunk's own
    # state
    dB,  # (batch, L, ngroups, dstate) output, B's dtype; (batch, L, ngroups, NS, dstate) fp32
    # partial sums over each split of the group's heads when NS > 1
    dC,  # as dB, C's dtype
    L,  # time steps
    H,  # nheads
    P,  # headdim
    G,  # ngroups
    N,  # dstate
    NC,  # chunks
    NS,  # splits of a group's heads
    HS,  # heads per split
    HAS_Z: tl.constexpr,
    HAS_SEG: tl.constexpr,
    CHUNK: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK_N: tl.constexpr,
    PRECISION: tl.constexpr,
    F32_DOT: tl.constexpr,  # matmul operands in float32 (at PRECISION); else in x's dtype
    EMULATE: tl.constexpr,  # the interpreter: _dot emulates the tensor cores' rounding
):
    """dB, dC of one chunk, group, split of its heads and dstate block, summed over the split's
    heads (Note [SSD Triton backward], 5)."""
    i_c = tl.program_id(0).to(tl.int64)
    i_bgs = tl.program_id(1).to(tl.int64)
    i_n = tl.program_id(2)
    i_s = i_bgs % NS
    i_bg = i_bgs // NS
    i_b = i_bg // G
    i_g = i_bg % G
    HG = H // G
    if F32_DOT:
        DOT = tl.float32
    else:
        DOT = x.dtype.element_ty
    o_i = tl.arange(0, CHUNK)
    o_t = i_c * CHUNK + o_i
    m_t = o_t < L
    o_n = i_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_n = o_n < N
    o_bc = ((i_b * L + o_t[:, None]) * G + i_g) * N + o_n[None, :]
    m_bc = m_t[:, None] & m_n[None, :]
    b_C = tl.load(C + o_bc, mask=m_bc, other=0.0).to(DOT)
    b_B = tl.load(B + o_bc, mask=m_bc, other=0.0).to(DOT)
    b_s = o_i  # unused without segments
    if HAS_SEG:
        b_s, s_prev, s_last = _segments(seg, i_b, i_c, o_t, L, CHUNK)
    b_dC = tl.zeros((CHUNK, BLOCK_N), dtype=tl.float32)
    b_dB = tl.zeros((CHUNK, BLOCK_N), dtype=tl.float32)
    b_dcb = tl.zeros((CHUNK, CHUNK), dtype=tl.float32)
    for j in range(i_s * HS, tl.minimum(i_s * HS + HS, HG)):
        i_h = i_g * HG + j
        o_hq = (i_b * H + i_h) * NC * CHUNK + i_c * CHUNK + o_i
        b_cs = tl.load(cs + o_hq)
        b_d = tl.load(dtp + o_hq)
        b_ld, b_end = _split_log_decays(b_cs, tl.load(cslo + o_hq), CHUNK)
        b_w = tl.exp(b_cs)
        b_e = tl.exp(b_end)
        if HAS_SEG:
            b_w = tl.where(b_s == s_prev, b_w, 0.0)
            b_e = tl.where(b_s == s_last, b_e, 0.0)
        b_gx = tl.zeros((CHUNK, CHUNK), dtype=tl.float32)
        o_state = ((i_b * NC + i_c) * H + i_h) * P * N
        for p0 in range(0, P, BLOCK_P):
            o_p = p0 + tl.arange(0, BLOCK_P)
            m_p = o_p < P
            o_x = ((i_b * L + o_t[:, None]) * H + i_h) * P + o_p[None, :]
            m_x = m_t[:, None] & m_p[None, :]
            b_X = tl.load(x + o_x, mask=m_x, other=0.0).to(tl.float32) * b_d[:, None]
            b_g = tl.load(dout + o_x, mask=m_x, other=0.0).to(tl.float32)
            if HAS_Z:
                b_z = tl.load(z + o_x, mask=m_x, other=0.0).to(tl.float32)
                b_g = b_g * b_z * tl.sigmoid(b_z)
            o_st = o_state + o_p[:, None] * N + o_n[None, :]  # (BLOCK_P, BLOCK_N)
            m_st = m_p[:, None] & m_n[None, :]
            b_S = _cast(tl.load(states + o_st, mask=m_st, other=0.0).to(tl.float32), DOT,
                        EMULATE)  # fmt: skip
            b_dS = _cast(tl.load(dstates + o_st, mask=m_st, other=0.0).to(tl.float32), DOT,
                         EMULATE)  # fmt: skip
            b_gd = _cast(b_g, DOT, EMULATE)
            b_Xd = _cast(b_X, DOT, EMULATE)
            b_dC += _dot(_cast(b_g * b_w[:, None], DOT, EMULATE), b_S, PRECISION, EMULATE)
            b_dB += _dot(_cast(b_X * b_e[:, None], DOT, EMULATE), b_dS, PRECISION, EMULATE)
            b_gx += _dot(b_gd, tl.trans(b_Xd), PRECISION, EMULATE)
        b_dcb += b_gx * _pair_decay(b_ld, b_s, CHUNK, HAS_SEG)
    b_dcbd = _cast(b_dcb, DOT, EMULATE)
    b_dC += _dot(b_dcbd, b_B, PRECISION, EMULATE)
    b_dB += _dot(tl.trans(b_dcbd), b_C, PRECISION, EMULATE)
    if NS > 1:
        o_part = (((i_b * L + o_t[:, None]) * G + i_g) * NS + i_s) * N + o_n[None, :]
        tl.store(dC + o_part, b_dC, mask=m_bc)
        tl.store(dB + o_part, b_dB, mask=m_bc)
    else:
        tl.store(dC + o_bc, b_dC.to(dC.dtype.element_ty), mask=m_bc)
        tl.store(dB + o_bc, b_dB.to(dB.dtype.element_ty), mask=m_bc)


# --- launchers ------------------------------------------------------------------------------------


def _contiguous(t: torch.Tensor | None) -> torch.Tensor | None:
    return t.contiguous() if t is not None else None


def launch(
    dout: torch.Tensor,
    dfinal_states: torch.Tensor | None,
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
    dx: torch.Tensor,
    ddt: torch.Tensor,
    dA: torch.Tensor,
    dB: torch.Tensor,
    dC: torch.Tensor,
    optional: list[torch.Tensor],
    plan: SSDPlan | None = None,
) -> None:
    """Run the backward into the preallocated gradients (``shapes.empty_backward_outputs``:
    dx, ddt, dA, dB, dC and ``optional`` = [dD, dz, ddt_bias, dinitial_states for those given])
    by ``plan`` (the planner's if None)."""
    grads = dict(zip(("x", "dt", "A", "B", "C"), (dx, ddt, dA, dB, dC)))
    given = [k for k, t in (("D", D), ("z", z), ("dt_bias", dt_bias),
                            ("initial_states", initial_states)) if t is not None]  # fmt: skip
    grads.update(zip(given, optional))
    if x.dtype == torch.float64:
        _launch_host(dout, dfinal_states, x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx,
                     dt_softplus, dt_min, dt_max, grads)  # fmt: skip
        return
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(
            f"ssmscan ssd_scan Triton kernels take float32/16, bfloat16 or float64 x; got {x.dtype}"
        )
    plan = plan if plan is not None else plan_for(x, B)
    batch, L, H, P = x.shape
    G, N = B.shape[2], B.shape[3]
    if L == 0 or batch == 0:
        for k, t in grads.items():
            if k == "initial_states" and dfinal_states is not None:
                t.copy_(dfinal_states)
            else:
                t.zero_()
        return
    x, dt, B, C = x.contiguous(), dt.contiguous(), B.contiguous(), C.contiguous()
    z, dout = _contiguous(z), dout.contiguous()
    dfinal = _contiguous(dfinal_states)
    init = _contiguous(initial_states)
    seg = segment_ids(seq_idx) if seq_idx is not None else None
    opts = dt_flags(dt_softplus, dt_bias, dt_min, dt_max)
    f32, dev = torch.float32, x.device
    final = torch.empty((batch, H, P, N), dtype=f32, device=dev)
    f32_dot = plan.f32_dot and x.dtype != f32
    Q = plan.chunk
    NC = cdiv(L, Q)
    # Note [SSD Triton walking backward]
    walk_f32 = f32_dot and plan.walks_f32_dot
    dtp, cs, cslo, states = triton_walk.launch_states(x, dt, A, B, dt_bias, init, seg, final,
                                                      opts, plan, walk_f32)  # fmt: skip
    nblk = triton_walk.dstates_blocks(int(P), int(N), plan)
    dk = torch.empty((batch, H, NC, nblk), dtype=f32, device=dev)
    dstates = triton_walk.launch_dstates(dout, z, C, seg, cs, states, dfinal,
                                         grads.get("initial_states"), dk, plan, walk_f32)  # fmt: skip
    ddt32 = torch.empty((batch, L, H), dtype=f32, device=dev)
    dD = torch.empty((batch, NC, H, P), dtype=f32, device=dev) if D is not None else None
    dA32 = torch.empty((batch, H, NC), dtype=f32, device=dev)
    prec = precision(plan, x.dtype)
    block_n = plan.block_n
    # 16-bit B and C multiply as they are: their products are exact in float32 either way
    exact_cb = B.dtype == C.dtype and B.dtype in (torch.float16, torch.bfloat16)
    cb = chunk_cb(B, C, L, plan, Q, f32_dot and not exact_cb) if plan.cb_once else None
    launcher(_ssd_scan_bwd_dx_kernel)[(NC, batch * H)](
        x, z, dout, dt, dt_bias, A, D, B, C, seg, dtp, cs, cslo, states, dstates, dk, cb,
        dx, grads.get("z"), ddt32, dD, dA32, L, H, P, G, N, NC, nblk,
        opts["dt_min"], opts["dt_max"], SOFTPLUS=opts["SOFTPLUS"], HAS_BIAS=opts["HAS_BIAS"],
        HAS_MIN=opts["HAS_MIN"], HAS_MAX=opts["HAS_MAX"], HAS_D=D is not None,
        D_PER_HEAD=D is not None and D.dim() == 1, HAS_Z=z is not None,
        HAS_SEG=seg is not None, HAS_CB=cb is not None, CHUNK=Q, BLOCK_P=plan.block_p,
        BLOCK_N=block_n,
        BLOCK_K=max(next_pow2(nblk), 2), PRECISION=prec,
        F32_DOT=f32_dot and plan.dx_f32_dot,
        STATE_DOT_16=states.dtype != f32 and B.dtype == C.dtype == states.dtype,
        EMULATE=plan.emulate, DA_SUMS=plan.da_sums, num_warps=plan.warps_dx,
        num_stages=plan.stages,
    )  # fmt: skip
    hs = min(plan.dbc_heads, H // G)  # heads per program of the dB / dC kernel
    ns = cdiv(H // G, hs)
    dB_out, dC_out = dB, dC
    if ns > 1:  # partial sums per split of a group's heads, then one deterministic sum
        dB_out = torch.empty((batch, L, G, ns, N), dtype=f32, device=dev)
        dC_out = torch.empty_like(dB_out)
    dbc_n = plan.dbc_block_n
    launcher(_ssd_scan_bwd_dbc_kernel)[(NC, batch * G * ns, cdiv(N, dbc_n))](
        x, z, dout, B, C, seg, dtp, cs, cslo, states, dstates, dB_out, dC_out, L, H, P, G, N, NC,
        ns, hs, HAS_Z=z is not None, HAS_SEG=seg is not None, CHUNK=Q, BLOCK_P=plan.dbc_block_p,
        BLOCK_N=dbc_n, PRECISION=prec, F32_DOT=f32_dot and plan.dbc_f32_dot,
        EMULATE=plan.emulate,
        num_warps=plan.warps_dbc, num_stages=plan.stages,
    )  # fmt: skip
    if ns > 1:
        dB.copy_(dB_out.sum(dim=3))
        dC.copy_(dC_out.sum(dim=3))
    dA.copy_(dA32.sum(dim=(0, 2)))
    ddt.copy_(ddt32)
    if dD is not None and D is not None:
        dDs = dD.sum(dim=(0, 1))
        grads["D"].copy_(dDs if D.dim() == 2 else dDs.sum(-1))
    if dt_bias is not None:
        grads["dt_bias"].copy_(ddt32.sum(dim=(0, 1)))


def _launch_host(*args: object) -> None:
    """float64: the CPU kernel on host copies (correct, not fast). ``args``: ``launch``'s first
    15, then the gradients by input name."""
    from ssmscan.ops.ssd_scan import cpu

    host = [t.cpu() if isinstance(t, torch.Tensor) else t for t in args[:15]]
    grads = args[15]
    assert isinstance(grads, dict)
    res = cpu.ssd_backward(*host, 64)  # type: ignore[arg-type, call-arg]  # launch's arguments, listed
    for k, t in grads.items():
        t.copy_(res[k])


def backward(
    dout: torch.Tensor,
    dfinal_states: torch.Tensor | None,
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
) -> tuple[
    torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, list[torch.Tensor]
]:
    """(dx, ddt, dA, dB, dC, [dD, dz, ddt_bias, dinitial_states for those given]), fresh
    (``shapes.empty_backward_outputs``), from the kernels, by ``plan`` (the planner's if None)."""
    dx, ddt, dA, dB, dC, optional = empty_backward_outputs(
        x, dt, A, B, C, D, z, dt_bias, initial_states
    )
    launch(dout, dfinal_states, x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx,
           dt_softplus, dt_min, dt_max, dx, ddt, dA, dB, dC, optional, plan)  # fmt: skip
    return dx, ddt, dA, dB, dC, optional
