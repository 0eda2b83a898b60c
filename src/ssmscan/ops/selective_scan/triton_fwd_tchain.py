"""Forward kernel of ``ssmscan::selective_scan_fwd``: time lanes chained by a look-back (CUDA,
N = 16; ``triton_fwd.TLANE_CHAIN``, with the time-lane forward).

Note [selective scan forward time-lane chain]
---------------------------------------------
The time-lane forward (Note [selective scan forward time lanes]) computes every exponential once
but walks L with one warp a channel: at batch 1, 1536 warps and a serial chain of tiles, latency
bound. The segment split has the warps but computes every exponential twice. Here every
(channel, 64-step tile) is its own one-warp program, and the tiles of a channel are chained the
way a single-pass prefix scan chains its blocks (decoupled look-back):

1. the program loads its tile, turns it into decays and inputs (a_j, b_j, kept in registers) and
   scans the time lanes' maps, as a time-lane tile does (steps 1-2 there), which gives the whole
   tile's map h -> P h + Q;
2. it publishes that map (``maps``, flag 1), then finds the state before its tile: walking back
   over the earlier tiles of its channel, composing published maps until it meets a published
   end state (flag 2; before tile 0, the initial state);
3. it publishes its own end state P h + Q (``ends``, flag 2) and runs its time lanes' steps from
   the state before each (step 3 there, no exponentials), y, skip, gate, store.

The grid is (dim, batch, tiles), so programs run channel-fastest: tile s of a channel starts
about a wave after tile s - 1 and usually finds its end state already published (one look).
A program only waits on programs of lower index; like every single-pass look-back scan it relies
on the hardware dispatching a grid's blocks in index order (a waiting block's predecessors are
then resident or done). The flags are zeroed by the launcher for each call (a CUDA graph replays
that memset too). Data stores, a barrier, then a release exchange of the flag; readers poll
with volatile loads and read the published values with volatile loads after the flag was seen.

Checkpoints (the state before each CK-step chunk, for the backward) are the look-back's states
of the tiles that start a chunk; the last program of a channel stores the final state.

Status: correct against float64 under the interpreter and on an H200 (the time-lane tests), off
(``triton_fwd.TLANE_CHAIN``) because it is slower than the segment split. H200, 2026-12-04, torch
2.11, CUDA graphs, forward ms, split / chain with fp32 rows / chain with 16-bit rows
(``device_twentysixth1.sh``): (1, 1536, 4096) bf16 0.0978 / 0.196 / 0.166, fp32 0.1055 / 0.198;
(1, 1024, 65536) bf16 0.859 / 2.02 / 1.68, fp32 0.954 / 2.03. Where the time goes (bf16, 16-bit
rows, ``device_twentysixth2.sh``; ``CHAIN`` probes give wrong results and bound the rest): the
kernel alone 160 us in Nsight Compute, 126 registers (16 one-warp programs a multiprocessor),
68.1M warp instructions (693 a 64-step tile), issue slots 41% busy at 0.66 eligible warps a
scheduler. Without any chain (``CHAIN`` = 0: every tile from the initial state, no flags) the
same tiles take 98.6 us (forward 0.1044 ms against the split's 0.0983): 80 registers, 57.7M
instructions (587 a tile: 9.2 a channel-step against the split's 9.9; the time-lane loop's
~446 a tile plus each program's setup, its loads, which no earlier tile overlaps, and its
epilogue), issue 56%. Publishing without looking back (``CHAIN`` = 2) 0.147; register caps of 96
/ 80 0.1725 / 0.220. So the exponentials saved do not pay for a program a tile even before the
chain, and the chain (the fences, the wait, everything live across it: 126 registers instead
of 80) costs as much again.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ssmscan.ops.selective_scan.triton_fwd_tlane import (
    _rows_last,
    _rows_up,
    _tlane_bc_rows,
    _tlane_loads,
    _tlane_maps,
    _tlane_steps,
)


@triton.jit
def _look_back(flags, maps, ends, c0, s, h_in, o_in):
    """The state before tile s of the channel whose tiles' flags start at ``flags + c0``: the
    published maps of tiles s - 1, s - 2, .. composed onto the first published end state met
    (``h_in`` before tile 0); (TL, KL, SPT) like ``h_in`` (``o_in``: (TL, NP), state n in every
    row; memory through 2-D blocks, as everywhere in the time-lane kernels)."""
    NP: tl.constexpr = o_in.shape[1]
    S3: tl.constexpr = h_in.shape
    accP = h_in * 0.0 + 1.0
    accQ = h_in * 0.0
    h0 = h_in
    j = s - 1
    go = 1
    while go != 0:
        f = tl.load(flags + c0 + j, volatile=True)
        while f == 0:
            f = tl.load(flags + c0 + j, volatile=True)
        if f == 2:
            v = tl.reshape(tl.load(ends + (c0 + j) * NP + o_in, volatile=True), S3)
            h0 = accP * v + accQ
            go = 0
        else:
            pP = tl.reshape(tl.load(maps + (c0 + j) * (2 * NP) + o_in, volatile=True), S3)
            pQ = tl.reshape(tl.load(maps + (c0 + j) * (2 * NP) + NP + o_in, volatile=True), S3)
            accQ = accP * pQ + accQ
            accP = accP * pP
            j -= 1
            if j < 0:
                h0 = accP * h_in + accQ
                go = 0
    return h0


@triton.jit
def _selective_scan_fwd_tchain_kernel(
    u,  # (batch, dim, L) input
    delta,  # (batch, dim, L) time step before bias / softplus
    A2,  # (dim, NP) fp32, A * log2(e); A itself if A_RAW
    Bt,  # (batch, G, LP, NP) B time-major, zero-padded (``triton_fwd_tlane.tile_steps``)
    Ct,  # (batch, G, LP, NP) C time-major, the same
    Dv,  # (dim,) fp32 skip weight, or None
    z,  # (batch, dim, L) gate, or None
    delta_bias,  # (dim,) fp32, or None
    init,  # (batch, dim, NP) fp32 initial state, or None
    out,  # (batch, dim, L) output, u's dtype
    ckpt,  # (batch, dim, NCK, NP) fp32: state before each chunk, last entry the final state
    last,  # (batch, dim, NP) fp32 out: the final state
    flags,  # (batch, dim, T) int32, zero: 1 a tile's map published, 2 its end state
    maps,  # (batch, dim, T, 2, NP) fp32: each tile's map (P, Q)
    ends,  # (batch, dim, T, NP) fp32: the state after each tile
    dim,  # channels
    L,  # sequence length
    LP,  # steps of Bt / Ct
    G,  # groups of B / C
    NCK,  # checkpoint entries = cdiv(L, CK) + 1
    T,  # tiles = cdiv(L, 64)
    SOFTPLUS: tl.constexpr,
    NP: tl.constexpr,  # states: 16
    CK: tl.constexpr,  # checkpoint chunk length, a multiple of 64
    HAS_D: tl.constexpr,
    HAS_Z: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_INIT: tl.constexpr,
    A_RAW: tl.constexpr,  # A2 is A: scaled by log2(e) here
    BC16: tl.constexpr = 0,  # as the time-lane kernel's: 1 bf16 pairs as int32 words, 2 fp16
    # timing probes only (wrong results otherwise): 0 no chain at all (every tile from h_in),
    # 2 publish but do not look back
    CHAIN: tl.constexpr = 1,
):
    tl.static_assert(NP == 16)
    TL: tl.constexpr = 8
    KL: tl.constexpr = 4
    R: tl.constexpr = TL
    SPT: tl.constexpr = NP // KL
    TPL: tl.constexpr = 2
    TPT: tl.constexpr = KL * TPL
    TILE: tl.constexpr = R * TPT
    S3: tl.constexpr = (R, KL, SPT)
    RW: tl.constexpr = NP // 2 if BC16 == 1 else NP
    S3W: tl.constexpr = (R, KL, SPT // 2) if BC16 == 1 else S3
    i_d = tl.program_id(0)
    i_b = tl.program_id(1).to(tl.int64)
    s = tl.program_id(2)
    t0 = s * TILE
    o_r = tl.arange(0, R)
    o_n = tl.arange(0, NP)
    o_k = tl.arange(0, KL)
    o_r3 = o_r[:, None, None]
    o_i3 = o_r3 % TL
    o_k2 = o_k[None, :]
    o_k3 = o_k[None, :, None]
    o_in = o_r[:, None] * 0 + o_n[None, :]  # (R, NP): state n in every row
    o_t = o_r[:, None] * TPT + tl.arange(0, TPT)[None, :]  # (R, TPT): step within the tile
    o_j = tl.reshape(o_t, (R, KL, TPL))
    row0 = (o_r == 0)[:, None] & (o_n < NP)[None, :]  # (R, NP): stores from one row
    rowL = (o_r == TL - 1)[:, None] & (o_n < NP)[None, :]  # (R, NP): stores from the last row

    b_A2 = tl.reshape(tl.load(A2 + i_d * NP + o_in), S3)
    if A_RAW:
        b_A2 = b_A2 * 1.4426950408889634
    b_D = tl.load(Dv + i_d) if HAS_D else 0.0
    b_bias = tl.load(delta_bias + i_d) if HAS_BIAS else 0.0
    ch = i_b * dim + i_d  # int64 channel index
    row = ch * L
    if G == 1:  # a constexpr then (Triton specializes 1): no division
        grp = 0
    else:
        grp = i_d // (dim // G)
    bc = (i_b * G + grp) * LP * RW
    o_iw = o_r[:, None] * 0 + tl.arange(0, RW)[None, :]
    p_B = Bt + bc + (o_r[:, None] * TPT) * RW + o_iw
    p_C = Ct + bc + (o_r[:, None] * TPT) * RW + o_iw
    b_u, b_x, b_z = _tlane_loads(u, delta, z, row, t0, L, o_t, R, KL, TPL, HAS_Z)
    rBs, rCs = _tlane_bc_rows(p_B, p_C, t0, RW, S3W, TPT)
    if HAS_INIT:
        h_in = tl.reshape(tl.load(init + ch * NP + o_in), S3)
    else:
        h_in = tl.zeros(S3, dtype=tl.float32)

    # 1. decays and inputs, each time lane's map, their scan: the tile's map in every row
    b_u, As, Bs, P, Q = _tlane_maps(b_u, b_x, b_A2, b_bias, rBs, t0, L, o_j, o_k, o_r3, SOFTPLUS,
                                    TL, KL, TPL, SPT)  # fmt: skip
    tP = _rows_last(P, o_k3, o_r3, TL)
    tQ = _rows_last(Q, o_k3, o_r3, TL)

    # 2. publish the map, look back for the state before the tile, publish the end state
    c0 = ch * T  # the channel's first tile
    cs = c0 + s
    if s == 0 or CHAIN == 0:
        h0 = h_in
    elif CHAIN == 2:
        tl.store(maps + cs * (2 * NP) + o_in, tl.reshape(tP, (R, NP)), mask=rowL)
        tl.store(maps + cs * (2 * NP) + NP + o_in, tl.reshape(tQ, (R, NP)), mask=rowL)
        tl.debug_barrier()
        tl.atomic_xchg(flags + cs, 1, sem="release", scope="gpu")
        h0 = h_in
    else:
        tl.store(maps + cs * (2 * NP) + o_in, tl.reshape(tP, (R, NP)), mask=rowL)
        tl.store(maps + cs * (2 * NP) + NP + o_in, tl.reshape(tQ, (R, NP)), mask=rowL)
        tl.debug_barrier()
        tl.atomic_xchg(flags + cs, 1, sem="release", scope="gpu")
        h0 = _look_back(flags, maps, ends, c0, s, h_in, o_in)
    hE = tP * h0 + tQ
    if CHAIN != 0:
        tl.store(ends + cs * NP + o_in, tl.reshape(hE, (R, NP)), mask=rowL)
        tl.debug_barrier()
        tl.atomic_xchg(flags + cs, 2, sem="release", scope="gpu")

    # 3. each time lane from the state before it, again through its steps
    E = P * h0 + Q
    g = tl.where(o_i3 == 0, h0, _rows_up(E, 1, o_r3))
    b_y = _tlane_steps(g, As, Bs, rCs, b_u, b_z, b_D, o_k2, SPT, HAS_D, HAS_Z)
    m = (t0 + o_t) < L
    tl.store(out + row + t0 + o_t, tl.reshape(b_y, (R, TPT)).to(out.dtype.element_ty), mask=m)
    p_ck = ckpt + ch * (NCK * NP) + o_in
    if t0 % CK == 0:
        tl.store(p_ck + (t0 // CK) * NP, tl.reshape(h0, (R, NP)), mask=row0)
    if s == T - 1:
        tl.store(p_ck + (NCK - 1) * NP, tl.reshape(hE, (R, NP)), mask=row0)
        tl.store(last + ch * NP + o_in, tl.reshape(hE, (R, NP)), mask=row0)
