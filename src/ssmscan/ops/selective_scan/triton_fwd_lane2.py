"""The lane forward's real pass with two channels a thread (CUDA; ``Policy.two_channels``).

Note [selective scan forward two channels a thread]
---------------------------------------------------
Nsight Compute on the batch-1 forward (H200, 2026-12-03, (1, 1536, 4096) bf16,) put the lane kernel's real pass at 89% of the
L1 data pipe's peak (``l1tex__data_pipe_lsu_wavefronts``), its local pass at 71%, with issue at
57% and the MUFU at 57% / 71%: the real pass is bound by what the L1 delivers to registers, not
by its instructions (a variant with 6% fewer instructions and 2 fewer MUFU a tile timed the
same). Per 8-step tile a warp takes ~125 wavefronts: 64 for its 16 B / C row loads (LDG.128, one
wavefront per 128 bytes delivered: 8 channels x 4 lanes x 16 bytes, the 8 channels' copies of
the same rows), 32 for u / delta / z / out (8 rows each), 22 for the shuffles. B_t / C_t do not
depend on the channel, so a thread holding two channels' states (the same KL lanes and SPT
states of channel d and d + BLOCK_D) serves both from one copy of the rows: half the row
wavefronts a (channel, state, step).

This kernel is ``_selective_scan_fwd_lane_kernel``'s real pass (``LOCAL`` off) with that layout,
written as two halves of BLOCK_D channels each (state-shaped blocks (BLOCK_D, KL, SPT) as there,
so Triton lays each half out exactly as the one-channel kernel and its shuffles hold; the rows
(1, KL, SPT) broadcast over both), for the geometry the batch-1 rows use: KL = 4 lanes of
TPL = 2 steps, ``Y_SCATTER``, the next tile's rows loaded after each step (``BC_ROLL``) and the
one-asm broadcasts with inline PTX (``BCAST_TILE``; a shuffle per step, or the masked sum
under the interpreter, otherwise). Everything else (segments and their fold, checkpoints, the
final state) is the lane kernel's.

Measured (H200, forward ms under CUDA graphs, against
the one-channel real pass in the same run): sm_90 compiles it to 159-161 registers (6 two-warp
programs a multiprocessor instead of 8) and 37.7 instead of 40.6 instructions a channel-step;
Nsight Compute puts the real pass at 66% of the L1 data pipe (from 89%), the pass now latency
bound at 2.5 warps a scheduler. bf16 / fp32: (1, 1536, 4096) 0.098 / 0.106 against 0.100 /
0.112 (real pass 52.6 against 56.2 us), (16, 1536, 1024) 0.207 / 0.220 against 0.238 / 0.276,
(1, 1024, 65536) 0.859 / 0.953 against 0.884 / 0.999. Where its programs fill fewer waves than
the one-channel pass's ((8, 4096, 2048): 1.29 waves) it was 7-8% slower, so an unsplit forward
takes it only where its waves fill as well (``plan.ch2_rows16``), and a split one plans its
segments for its registers (``plan.fill_waves``). Capped at 128 registers it spills and is
slower; the two halves updated one after the other saved no registers.

What bounds it now (H200, bf16 (1, 1536, 4096), 51.9 us, measured by variants of the kernel): with its 64 decays a
tile-thread computed without MUFU but as many instructions it took 48.9 us, without softplus
and the gate's sigmoid (16% fewer instructions) 47.7 us, with every segment reading hot B / C
rows 52.0 us. Issue and the MUFU pipe are balanced in the loop (609 instructions a tile-warp;
76 MUFU, each holding its partition's MUFU 8 cycles: 608) and bound it together: removing one
without the other buys little, and more warps do not help (its rows 4 steps ahead, 128
registers, 8 programs a multiprocessor: slower). Its programs of one segment placed on one
multiprocessor, a ``tanh.approx`` gate and a start in the local pass's last wave
(programmatic dependent launch and flags) were no faster either.

The local pass in this layout (the kernel with a ``LOCAL`` pass, one copy of the B rows for both halves; sm_90 127 registers, 8% fewer
instructions a channel-step) was slower: 38.3 against the one-channel local pass's 34.7 us at
(1, 1536, 4096) bf16, with half its warps. Nsight Compute puts the one-channel local pass at 75%
of its MUFU pipe, the MIO queue (MUFU, shuffles, loads) its top stall, and it needs its warps to
get there; more warps (its rows through shared memory, 40 registers) or fewer shuffles (u
broadcast in bf16) did not move it.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ssmscan.ops.selective_scan.triton_common import _sigmoid, _softplus
from ssmscan.ops.selective_scan.triton_fwd_lane import (
    _bc_f32,
    _lane_bc_loads,
    _lane_bcast,
    _lane_elem_loads,
    _slot,
    _tile_bcast,
    _y_scatter,
    fold_segments,
)


@triton.jit
def _fold_pair(h0, h1, seg_state, seg_dt, b_A0, b_A1, i_b, NSEG, count, dim, o_d0, o_d1, m_d0,
               m_d1, GROUP: tl.constexpr):  # fmt: skip
    """Both halves' states folded over the first ``count`` segments, as ``fold_segments`` does
    each (h = exp2(A2 sum dt_s) h + S_s), with both halves' loads of GROUP segments issued
    before their steps: one load latency per GROUP segments for the two halves, not two per
    four."""
    NP: tl.constexpr = h0.shape[1] * h0.shape[2]
    o_dn0 = o_d0[:, None] * NP + tl.arange(0, NP)[None, :]
    o_dn1 = o_d1[:, None] * NP + tl.arange(0, NP)[None, :]
    for q in range(0, tl.cdiv(count, GROUP)):
        l0 = ()
        l1 = ()
        t0 = ()
        t1 = ()
        for r in tl.static_range(GROUP):
            j = q * GROUP + r
            ok = j < count
            p_loc = seg_state + (i_b * NSEG + j) * (dim * NP)
            p_dt = seg_dt + (i_b * NSEG + j) * dim
            m0 = m_d0[:, None] & ok
            m1 = m_d1[:, None] & ok
            l0 = l0 + (tl.reshape(tl.load(p_loc + o_dn0, mask=m0, other=0.0), h0.shape),)  # type: ignore[assignment]  # noqa: RUF005  (Triton tuples)
            l1 = l1 + (tl.reshape(tl.load(p_loc + o_dn1, mask=m1, other=0.0), h1.shape),)  # type: ignore[assignment]  # noqa: RUF005  (Triton tuples)
            t0 = t0 + (tl.load(p_dt + o_d0, mask=m_d0 & ok, other=0.0),)  # type: ignore[assignment]  # noqa: RUF005  (Triton tuples)
            t1 = t1 + (tl.load(p_dt + o_d1, mask=m_d1 & ok, other=0.0),)  # type: ignore[assignment]  # noqa: RUF005  (Triton tuples)
        for r in tl.static_range(GROUP):
            h0 = tl.exp2(t0[r][:, None, None] * b_A0) * h0 + l0[r]
            h1 = tl.exp2(t1[r][:, None, None] * b_A1) * h1 + l1[r]
    return h0, h1


@triton.jit
def _elem_prep(ins, b_bias, m, SOFTPLUS: tl.constexpr, HAS_BIAS: tl.constexpr):
    """(u, dt, dt * u, z) of a half's tile as loaded (``_lane_elem_loads``): dt = softplus(delta
    + bias), zero where ``m`` is off (decay 1, no input)."""
    b_u, b_dt, b_z = ins
    b_u = b_u.to(tl.float32)
    b_dt = b_dt.to(tl.float32)
    if HAS_BIAS:
        b_dt += b_bias[:, None, None]
    if SOFTPLUS:
        b_dt = _softplus(b_dt)
    if m is not None:  # (None: ``EVEN``)
        b_dt = tl.where(m, b_dt, 0.0)
    return b_u, b_dt, b_dt * b_u, b_z


@triton.jit
def _y_out(ys, b_u, b_z, b_D, out, row, m_d, o_k, t0, t_end, KL: tl.constexpr, TPL: tl.constexpr,
           HAS_D: tl.constexpr, HAS_Z: tl.constexpr, PTX: tl.constexpr):  # fmt: skip
    """A half's y of the tile from its per-lane partial sums: reduced and scattered over the
    lanes (``_y_scatter``), plus D u, times silu(z), stored."""
    TT: tl.constexpr = KL * TPL
    b_y = _y_scatter(ys, o_k[None, :], PTX)
    if HAS_D:
        b_y += b_D[:, None, None] * b_u
    if HAS_Z:
        b_z = b_z.to(tl.float32)
        b_y *= b_z * _sigmoid(b_z, PTX)
    o_tt = t0 + tl.arange(0, TT)
    p = row[:, None] + o_tt[None, :]
    if t_end is None:  # ``EVEN``
        m2 = m_d[:, None]
    else:
        m2 = m_d[:, None] & (o_tt < t_end)[None, :]
    tl.store(out + p, tl.reshape(b_y, (row.shape[0], TT)).to(out.dtype.element_ty), mask=m2)


@triton.jit
def _fwd_tile_lane2(h0, h1, ins0, ins1, Bs, Cs, b_A0, b_A1, out, b_bias0, b_bias1, b_D0, b_D1,
                    row0, row1, m_d0, m_d1, o_k, o_j, t0, t_end, q_B, q_C,
                    SOFTPLUS: tl.constexpr, KL: tl.constexpr, TPL: tl.constexpr,
                    HAS_D: tl.constexpr, HAS_Z: tl.constexpr, HAS_BIAS: tl.constexpr,
                    BCAST_TILE: tl.constexpr, PTX: tl.constexpr):  # fmt: skip
    """The TT = KL * TPL steps from t0 of both halves (``_fwd_tile_lane``'s real pass, one copy
    of the rows Bs / Cs for both), y stored; returns (h0, h1, the next tile's B rows, its C
    rows), row j loaded from q_B / q_C right after step j."""
    TT: tl.constexpr = KL * TPL
    if t_end is None:  # ``EVEN``: whole tiles, every channel
        m0 = None
        m1 = None
    else:
        m0 = m_d0[:, None, None] & (t0 + o_j < t_end)
        m1 = m_d1[:, None, None] & (t0 + o_j < t_end)
    u0, dt0, du0, z0 = _elem_prep(ins0, b_bias0, m0, SOFTPLUS, HAS_BIAS)
    u1, dt1, du1, z1 = _elem_prep(ins1, b_bias1, m1, SOFTPLUS, HAS_BIAS)
    ONE: tl.constexpr = BCAST_TILE and PTX
    if ONE:
        bdt0, bdu0 = _tile_bcast(dt0, du0, KL, TPL)
        bdt1, bdu1 = _tile_bcast(dt1, du1, KL, TPL)
    ys0 = ()
    ys1 = ()
    nBs = ()
    nCs = ()
    SH: tl.constexpr = (1, KL, Bs[0].shape[2])  # a row as loaded
    NPL: tl.constexpr = KL * Bs[0].shape[2]
    SPT: tl.constexpr = b_A0.shape[2]
    for j in tl.static_range(TT):
        if ONE:
            a0 = bdt0[j][:, :, None]
            c0 = bdu0[j][:, :, None]
            a1 = bdt1[j][:, :, None]
            c1 = bdu1[j][:, :, None]
        else:
            a0 = _lane_bcast(_slot(dt0, j % TPL, TPL), o_k, j // TPL, KL, PTX)[:, :, None]
            c0 = _lane_bcast(_slot(du0, j % TPL, TPL), o_k, j // TPL, KL, PTX)[:, :, None]
            a1 = _lane_bcast(_slot(dt1, j % TPL, TPL), o_k, j // TPL, KL, PTX)[:, :, None]
            c1 = _lane_bcast(_slot(du1, j % TPL, TPL), o_k, j // TPL, KL, PTX)[:, :, None]
        b_B = _bc_f32(Bs[j], SPT)
        b_C = _bc_f32(Cs[j], SPT)
        h0 = tl.exp2(a0 * b_A0) * h0 + c0 * b_B
        h1 = tl.exp2(a1 * b_A1) * h1 + c1 * b_B
        ys0 = ys0 + (tl.sum(h0 * b_C, axis=2),)  # type: ignore[assignment]  # noqa: RUF005  (Triton tuples)
        ys1 = ys1 + (tl.sum(h1 * b_C, axis=2),)  # type: ignore[assignment]  # noqa: RUF005  (Triton tuples)
        nBs = nBs + (tl.reshape(tl.load(q_B + j * NPL), SH),)  # type: ignore[assignment]  # noqa: RUF005  (Triton tuples)
        nCs = nCs + (tl.reshape(tl.load(q_C + j * NPL), SH),)  # type: ignore[assignment]  # noqa: RUF005  (Triton tuples)
    _y_out(ys0, u0, z0, b_D0, out, row0, m_d0, o_k, t0, t_end, KL, TPL, HAS_D, HAS_Z, PTX)
    _y_out(ys1, u1, z1, b_D1, out, row1, m_d1, o_k, t0, t_end, KL, TPL, HAS_D, HAS_Z, PTX)
    return h0, h1, nBs, nCs


@triton.jit
def _half_setup(A2, Dv, delta_bias, init, o_d, m_d, i_b, dim, NP: tl.constexpr, S3: tl.constexpr,
                A_RAW: tl.constexpr, HAS_D: tl.constexpr, HAS_BIAS: tl.constexpr,
                HAS_INIT: tl.constexpr):  # fmt: skip
    """A half's A2 (scaled by log2(e) with A_RAW), D, bias and starting state (init or zeros)."""
    o_dn = o_d[:, None] * NP + tl.arange(0, NP)[None, :]
    m_dn = m_d[:, None]
    b_A2 = tl.reshape(tl.load(A2 + o_dn, mask=m_dn, other=0.0), S3)
    if A_RAW:
        b_A2 = b_A2 * 1.4426950408889634
    b_D = tl.load(Dv + o_d, mask=m_d, other=0.0) if HAS_D else None
    b_bias = tl.load(delta_bias + o_d, mask=m_d, other=0.0) if HAS_BIAS else None
    if HAS_INIT:
        h = tl.reshape(tl.load(init + i_b * dim * NP + o_dn, mask=m_dn, other=0.0), S3)
    else:
        h = tl.zeros(S3, dtype=tl.float32)
    return b_A2, b_D, b_bias, h


@triton.jit
def _selective_scan_fwd_lane2_kernel(
    u,  # (batch, dim, L) input
    delta,  # (batch, dim, L) time step before bias / softplus
    A2,  # (dim, NP) fp32, A * log2(e), zero-padded states; A itself if A_RAW
    Bt,  # (batch, G, LP, NP) B time-major, zero-padded states and steps: fp32 or as BC16 says
    Ct,  # (batch, G, LP, NP) C time-major, as Bt
    Dv,  # (dim,) fp32 skip weight, or None
    z,  # (batch, dim, L) gate, or None
    delta_bias,  # (dim,) fp32, or None
    init,  # (batch, dim, NP) fp32 initial state (padded), or None
    out,  # (batch, dim, L) output, u's dtype
    ckpt,  # (batch, dim, NCK, NP) fp32: state before each chunk, last entry the final state
    seg_state,  # (batch, NSEG, dim, NP) fp32 the local pass's segment end states, or None
    seg_dt,  # (batch, NSEG, dim) fp32 its sums of dt over the segments, or None
    last,  # (batch, dim, NP) fp32 out: the final state, or None
    dim,  # channels
    L,  # sequence length
    LP,  # steps of Bt / Ct (``padded_steps``)
    N,  # states
    G,  # groups of B / C
    NCK,  # checkpoint entries = cdiv(L, CK) + 1
    SEG,  # segment length (program axis 2): checkpoint chunks, or tiles with SEG_T
    SOFTPLUS: tl.constexpr,
    NP: tl.constexpr,
    CK: tl.constexpr,
    BLOCK_D: tl.constexpr,  # channels per half: a program holds 2 * BLOCK_D
    KL: tl.constexpr,
    TPL: tl.constexpr,
    HAS_D: tl.constexpr,
    HAS_Z: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_INIT: tl.constexpr,
    SPLIT: tl.constexpr,
    A_RAW: tl.constexpr,
    HAS_LAST: tl.constexpr,
    PTX: tl.constexpr,  # inline PTX (shuffles, ``rcp``); else portable ``tl`` code
    BCAST_TILE: tl.constexpr = False,
    SEG_T: tl.constexpr = False,
    BC16: tl.constexpr = 0,  # the lane kernel's: 16-bit Bt / Ct rows
    FOLD: tl.constexpr = 1,  # the lane kernel's: local segments per real one
    # segments whose states the fold loads at a time, for both halves (``_fold_pair``)
    FOLD_GROUP: tl.constexpr = 0,
    EVEN: tl.constexpr = False,  # the lane kernel's (channels: dim % (2 BLOCK_D) == 0)
    AHEAD: tl.constexpr = 1,  # tiles ahead that u, delta, z are loaded (1 or 2)
    I32: tl.constexpr = False,  # the lane kernel's
):
    SPT: tl.constexpr = NP // KL
    TT: tl.constexpr = KL * TPL
    RW: tl.constexpr = NP // 2 if BC16 == 1 else NP  # a B / C row's elements in Bt / Ct
    S3: tl.constexpr = (BLOCK_D, KL, SPT)
    i_d = tl.program_id(0)
    i_b = tl.program_id(1).to(tl.int64)
    i_s = tl.program_id(2)
    NSEG = tl.num_programs(2) * FOLD  # the local segments' buffer
    o_d0 = i_d * (2 * BLOCK_D) + tl.arange(0, BLOCK_D)
    o_d1 = o_d0 + BLOCK_D
    if EVEN:  # constant masks: they fold away
        m_d0 = tl.full((BLOCK_D,), 1, tl.int1)
        m_d1 = tl.full((BLOCK_D,), 1, tl.int1)
    else:
        m_d0 = o_d0 < dim
        m_d1 = o_d1 < dim
    o_k = tl.arange(0, KL)
    o_n = tl.arange(0, NP)
    o_j = (o_k[:, None] * TPL + tl.arange(0, TPL)[None, :])[None, :, :]
    b_A0, b_D0, b_bias0, h0 = _half_setup(A2, Dv, delta_bias, init, o_d0, m_d0, i_b, dim, NP, S3,
                                          A_RAW, HAS_D, HAS_BIAS, HAS_INIT)  # fmt: skip
    b_A1, b_D1, b_bias1, h1 = _half_setup(A2, Dv, delta_bias, init, o_d1, m_d1, i_b, dim, NP, S3,
                                          A_RAW, HAS_D, HAS_BIAS, HAS_INIT)  # fmt: skip
    if I32:
        row0 = (tl.program_id(1) * dim + o_d0) * L
        row1 = (tl.program_id(1) * dim + o_d1) * L
    else:
        row0 = (i_b * dim + o_d0.to(tl.int64)) * L
        row1 = (i_b * dim + o_d1.to(tl.int64)) * L
    grp = (i_d * (2 * BLOCK_D)) // (dim // G)  # a program never straddles two groups
    bc = (i_b * G + grp) * LP * RW
    p_B = Bt + bc + tl.arange(0, RW)
    p_C = Ct + bc + tl.arange(0, RW)
    p_ck0 = ckpt + (i_b * dim + o_d0.to(tl.int64))[:, None] * (NCK * NP) + o_n[None, :]
    p_ck1 = ckpt + (i_b * dim + o_d1.to(tl.int64))[:, None] * (NCK * NP) + o_n[None, :]
    m_dn0 = m_d0[:, None]
    m_dn1 = m_d1[:, None]
    if SPLIT and SEG_T:
        t_beg = i_s * (SEG * TT)
        t_end = tl.minimum(t_beg + SEG * TT, L)
    elif SPLIT:
        t_beg = i_s * SEG * CK
        t_end = tl.minimum(t_beg + SEG * CK, L)
    else:
        t_beg = 0
        t_end = L
    if SPLIT:  # the fold of the earlier segments (Note [selective scan segments])
        nf = i_s * FOLD
        if FOLD_GROUP > 0:
            h0, h1 = _fold_pair(h0, h1, seg_state, seg_dt, b_A0, b_A1, i_b, NSEG, nf, dim, o_d0,
                                o_d1, m_d0, m_d1, FOLD_GROUP)  # fmt: skip
        else:
            h0 = fold_segments(h0, seg_state, seg_dt, b_A0, i_b, NSEG, 0, nf, 1, dim, o_d0, m_d0)
            h1 = fold_segments(h1, seg_state, seg_dt, b_A1, i_b, NSEG, 0, nf, 1, dim, o_d1, m_d1)
    if EVEN:  # the masks' end: none (whole tiles)
        t_m = None
    else:
        t_m = t_end
    e0 = _lane_elem_loads(u, delta, z, row0, m_d0, t_beg, t_m, KL, TPL, HAS_Z, False)
    e1 = _lane_elem_loads(u, delta, z, row1, m_d1, t_beg, t_m, KL, TPL, HAS_Z, False)
    if AHEAD == 2:
        if EVEN:
            t_2 = tl.minimum(t_beg + TT, t_end - TT)
        else:
            t_2 = t_beg + TT
        n0 = _lane_elem_loads(u, delta, z, row0, m_d0, t_2, t_m, KL, TPL, HAS_Z, False)
        n1 = _lane_elem_loads(u, delta, z, row1, m_d1, t_2, t_m, KL, TPL, HAS_Z, False)
    nB, nC = _lane_bc_loads(u, p_B, p_C, t_beg, RW, KL, TPL, False)
    for t0 in tl.range(t_beg, t_end, TT):
        t0 = tl.multiple_of(t0, TT)
        if t0 % CK == 0:
            tl.store(p_ck0 + (t0 // CK) * NP, tl.reshape(h0, (BLOCK_D, NP)), mask=m_dn0)
            tl.store(p_ck1 + (t0 // CK) * NP, tl.reshape(h1, (BLOCK_D, NP)), mask=m_dn1)
        i0 = e0
        i1 = e1
        if EVEN:  # (the segment's last tile again after its last: no mask, in bounds)
            t_nx = tl.minimum(t0 + AHEAD * TT, t_end - TT)
        else:
            t_nx = t0 + AHEAD * TT
        if AHEAD == 2:
            e0 = n0
            e1 = n1
            n0 = _lane_elem_loads(u, delta, z, row0, m_d0, t_nx, t_m, KL, TPL, HAS_Z, False)
            n1 = _lane_elem_loads(u, delta, z, row1, m_d1, t_nx, t_m, KL, TPL, HAS_Z, False)
        else:
            e0 = _lane_elem_loads(u, delta, z, row0, m_d0, t_nx, t_m, KL, TPL, HAS_Z, False)
            e1 = _lane_elem_loads(u, delta, z, row1, m_d1, t_nx, t_m, KL, TPL, HAS_Z, False)
        h0, h1, nB, nC = _fwd_tile_lane2(
            h0, h1, i0, i1, nB, nC, b_A0, b_A1, out, b_bias0, b_bias1, b_D0, b_D1, row0, row1,
            m_d0, m_d1, o_k, o_j, t0, t_m, p_B + (t0 + TT) * RW, p_C + (t0 + TT) * RW,
            SOFTPLUS, KL, TPL, HAS_D, HAS_Z, HAS_BIAS, BCAST_TILE, PTX,
        )  # fmt: skip
    if t_end == L:  # the last segment: the final checkpoint entry (and state)
        NC = NCK - 1
        tl.store(p_ck0 + NC * NP, tl.reshape(h0, (BLOCK_D, NP)), mask=m_dn0)
        tl.store(p_ck1 + NC * NP, tl.reshape(h1, (BLOCK_D, NP)), mask=m_dn1)
        if HAS_LAST:
            o_dn0 = o_d0[:, None] * NP + o_n[None, :]
            o_dn1 = o_d1[:, None] * NP + o_n[None, :]
            tl.store(last + i_b * dim * NP + o_dn0, tl.reshape(h0, (BLOCK_D, NP)), mask=m_dn0)
            tl.store(last + i_b * dim * NP + o_dn1, tl.reshape(h1, (BLOCK_D, NP)), mask=m_dn1)
