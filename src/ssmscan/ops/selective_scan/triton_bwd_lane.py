"""The "lane" kernels of ``ssmscan::selective_scan_bwd`` (CUDA; the plan's ``main = "lane"``, the
default): the main kernel and the segments' local pass.

Note [selective scan backward lanes]
------------------------------------
The split backward's kernel (Note [selective scan backward split]: one warp of 8 channels a
program, the segment's 8-step tiles in reverse from the states kernel's tile-start states, the
tile's states recomputed and kept, the adjoint back through them) on the lane forward's layout
(Note [selective scan forward lanes]): states (8, KL = 4, SPT = 4), state n = 4 k + s on lane
k of the channel; tiles (8, 4, 2), step 2 k + s; both loaded and stored as 2-D blocks and
reshaped. So each step's dt, dt * u and dy reach a channel's 4 lanes by one ``shfl.sync.idx``
(``_lane_bcast``) instead of ``_col``'s select, 2 butterflies and adds, and B_t / C_t come from
time-padded copies without masks (LP steps, ``padded_steps``).

dB_t / dC_t over the warp's 8 channels (lane bits 2-4 = channel bits 0-2): ``_rs8l``, a
reduce-scatter that halves the in-thread states twice (channel bit 2, then 1) and sums the last
value over channel bit 0: 4 shuffles; lane (d, k) ends with the total for state 4 k + 2 (d >> 2
& 1) + (d >> 1 & 1), rows d and d ^ 1 alike, stored once (d even).

Both shuffles rely on Triton's layouts: ``lane_layout_problem`` (``layout_check``) checks the
``shfl.sync.idx`` operands; ``bfly_layout_problem`` here the butterflies' (lane bits 0-1 on k,
2-4 on the channel). The eager launcher runs both on every kernel it compiles before its first
launch; the launcher falls back to the split kernel when they fail.

Each iteration loads the *next* tile's start state and u / delta / dout / z (``PREFETCH``,
carried through the loop; 255 registers, no spills) and prefetches its B_t / C_t rows into L1
(``_prefetch_bc_l1``, ``PREFETCH_BC``: a hint, one L1 prefetch per thread and tile).
Why: Nsight Compute on the kernel without them (H200, (8, 4096, 2048, 16) bf16): 2 warps per
scheduler (255 registers), issue slots 41% busy, 37% of the cycles between a warp's instructions
waiting on memory loads; cutting instructions (129 here vs the split kernel's 151 per step) had
bought only 1-3%. With the tile prefetch the kernel went 2.66 -> 2.36 ms bf16, 2.64 -> 2.57 fp32
there, 0.98 -> 0.89 / 0.98 -> 0.97 at (16, 1536, 1024, 16); the L1 prefetch then 2.57 -> 2.48
fp32 (bf16 unchanged) and 4.91 -> 4.63 ms for the whole forward+backward at (1, 1024, 65536, 16)
bf16. Register caps (``maxnreg`` 200 / 184 / 168, 10-12 warps per multiprocessor) spill and were
13-45% slower; reloading B_t / C_t in the adjoint instead of keeping them, 15-20% slower.

Status: the default backward main kernel since 2026-12-01: correct against
float64 on the H200 in fp32 / bf16 / fp16 (the GPU tests), faster than the
split kernel at every benchmark shape but (1, 1024, 65536) bf16 without the L1 prefetch.

The segments' local pass (Note [selective scan segments]) has a lane kernel here too
(``_selective_scan_bwd_lane_local_kernel``: the adjoint alone on the lane tiles, next tile
prefetched; only ``shfl.sync.idx`` broadcasts, checked like the forward's).

Note [traced kernels' inline asm]
---------------------------------
Under ``torch.compile`` / export a launch is a ``wrap_triton`` node, and torch works out which
arguments the kernel writes from its TTIR (``identify_mutated_tensors``). Where it takes an input
as written, AOT autograd copies the "result" back into that input, and where the input is a leaf
that requires grad the compile fails ("a leaf Variable that requires grad is being used in an
in-place operation": H200, torch 2.11, 2026-12-02, ``ssmscan.selective_scan`` on leaves under
``torch.compile(mode="reduce-overhead")``; where the inputs do not require grad the compile
passes, with those copies presumably in its graph). Two things made it do so:

* an inline asm it cannot prove free of side effects (``is_pure=False``: the L1 prefetch, which
  must not be optimized away) stops the analysis, and torch then takes *every* argument as
  written. So a traced launch of this main kernel goes without it (the plan's
  ``prefetch_bc``; the kernel without the prefetch checked against float64 on the H200), and
  every other inline asm is pure (shuffles, ``rcp``);
* torch takes a value that a (not yet inlined) ``tt.call`` returns as derived from every argument
  of the call: the tile and split backward kernels stored their gradients at offsets that
  ``_tile_inputs`` returned beside its loads of u / delta / dout / z, so those four counted as
  written (the failure above: L = 300 takes the tile backward). The offsets now come from
  ``_tile_offsets``, which takes no pointers.

``tests/ops/selective_scan/mutation_check.py`` (a CPU test) records every launch of a training
step over the kernel variants (and linear_scan's, selective_state_update's) and runs torch's own
analysis on their sm_90 TTIR: no op input may be among the written arguments; its negative
control, the eager prefetch, must be. ``lane_layout_check.py`` also fails on a non-pure inline
asm in the traced configurations' TTIR.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ssmscan.ops.selective_scan.triton_common import (
    _bfly,
    _fold_chunk_sums,
    _prefetch_l1,
    _sigmoid,
    _softplus,
)
from ssmscan.ops.selective_scan.triton_fwd_lane import (
    _fwd_tile_lane,
    _lane_bcast,
    _lane_loads,
    _slot,
    _tile_bcast,
    _tile_bcast1,
    fold_segments,
)


@triton.jit
def _bfly_rows3(x, MASK: tl.constexpr, EMU: tl.constexpr, RANK: tl.constexpr):
    """Rows ``d ^ (MASK // 4)`` of x (rank RANK, 2 or 3, rows first): lane ``laneid ^ MASK``'s
    value on the GPU (lane bits 2-4 are the row bits); EMU, the same rows by ``tl.gather``."""
    if EMU:
        if RANK == 3:
            d = tl.arange(0, x.shape[0])[:, None, None] ^ (MASK // 4)
        else:
            d = tl.arange(0, x.shape[0])[:, None] ^ (MASK // 4)
        return tl.gather(x, tl.broadcast_to(d, x.shape), axis=0)
    return _bfly(x, MASK)


@triton.jit
def _rs8l(x, EMU: tl.constexpr):
    """Sum over the 8 rows (channels) of x (8, 4, 4) (state 4 k + s at [:, k, s]), scattered:
    (8, 4) r, r[d, k] the total for state 4 k + 2 (d >> 2 & 1) + (d >> 1 & 1) (Note [selective
    scan backward lanes]). Logical indices but for the shuffles."""
    d3 = tl.arange(0, 8)[:, None, None]
    # s = 2 i + j: halves by i (channel bit 2 keeps i = 1)
    lo, hi = tl.split(tl.permute(tl.reshape(x, (8, 4, 2, 2)), (0, 1, 3, 2)))
    up = ((d3 >> 2) & 1) == 1
    x = tl.where(up, hi, lo) + _bfly_rows3(tl.where(up, lo, hi), 16, EMU, 3)  # (8, 4, 2) over j
    d2 = tl.arange(0, 8)[:, None]
    a, b = tl.split(x)
    up = ((d2 >> 1) & 1) == 1
    x = tl.where(up, b, a) + _bfly_rows3(tl.where(up, a, b), 8, EMU, 2)
    return x + _bfly_rows3(x, 4, EMU, 2)


@triton.jit
def _store_rs8l(base, x, m, EMU: tl.constexpr):
    """base[n] = sum over the 8 rows of x[:, n // 4, n % 4] (``_rs8l``), each n stored once, if
    m."""
    r = _rs8l(x, EMU)
    d = tl.arange(0, 8)[:, None]
    k = tl.arange(0, 4)[None, :]
    n = 4 * k + 2 * ((d >> 2) & 1) + ((d >> 1) & 1)
    tl.store(base + n, r, mask=((d & 1) == 0) & m)


@triton.jit
def _sum_states(x):
    """(8, 4, 4) -> (8,): the sum over a channel's states."""
    return tl.sum(tl.sum(x, axis=2), axis=1)


@triton.jit
def _prefetch_bc_l1(Bt, Ct, row0, BLOCK_D: tl.constexpr, KL: tl.constexpr, NP: tl.constexpr,
                    PTX: tl.constexpr):  # fmt: skip
    """The L1 prefetch of the TT = 8 rows of B_t and of C_t from element ``row0`` of the
    time-padded copies (2 x 512 bytes): one 32-byte sector per thread of the (BLOCK_D, KL) =
    (8, 4) warp. A hint: nothing is read into registers, so no layout assumption (a different
    layout only prefetches a sector twice); nothing without PTX."""
    tl.static_assert(NP == 16 and BLOCK_D * KL == 32)  # 8 steps x 16 states = 16 sectors each
    if PTX:
        i = tl.arange(0, BLOCK_D)[:, None] * KL + tl.arange(0, KL)[None, :]  # 0 .. 31
        off = row0 + (i % 16) * 8  # 16 sectors of 8 floats: 8 steps x NP = 16 states
        p = tl.where(i < 16, Bt + off, Ct + off)
        _prefetch_l1(p)


@triton.jit
def _bwd_lane_loads(
    dout,
    u,
    delta,
    z,
    p_ts,
    row,
    m_dn,
    k,
    L,
    NP: tl.constexpr,
    KL: tl.constexpr,
    TPL: tl.constexpr,
    HAS_Z: tl.constexpr,
):
    """Tile k's start state (BLOCK_D, KL, NP // KL) and its u, delta, dout, z (dout when there
    is none) as loaded, (BLOCK_D, KL, TPL): (BLOCK_D, TT) blocks reshaped (Note [selective scan
    forward lanes]: 3-D offsets would put the channels on the lanes)."""
    BLOCK_D: tl.constexpr = row.shape[0]
    TT: tl.constexpr = KL * TPL
    T3: tl.constexpr = (BLOCK_D, KL, TPL)
    hs = tl.reshape(tl.load(p_ts + k * NP, mask=m_dn, other=0.0), (BLOCK_D, KL, NP // KL))
    o_tt = k * TT + tl.arange(0, TT)
    m2 = m_dn & (o_tt < L)[None, :]
    p = row[:, None] + o_tt[None, :]
    b_u = tl.reshape(tl.load(u + p, mask=m2, other=0.0), T3)
    b_x = tl.reshape(tl.load(delta + p, mask=m2, other=0.0), T3)
    b_do = tl.reshape(tl.load(dout + p, mask=m2, other=0.0), T3)
    if HAS_Z:
        b_z = tl.reshape(tl.load(z + p, mask=m2, other=0.0), T3)
    else:
        b_z = b_do
    return hs, b_u, b_x, b_do, b_z


@triton.jit
def _selective_scan_bwd_lane_kernel(
    dout,  # (batch, dim, L) gradient of out, u's dtype
    dlast,  # (batch, dim, NP) fp32 gradient of the last state, or None
    u,  # (batch, dim, L)
    delta,  # (batch, dim, L)
    A2,  # (dim, NP) fp32, A * log2(e)
    Bt,  # (batch, G, LP, NP) fp32, time-padded (``padded_steps``)
    Ct,  # (batch, G, LP, NP) fp32, time-padded
    Dv,  # (dim,) fp32 or None
    z,  # (batch, dim, L) or None
    delta_bias,  # (dim,) fp32 or None
    tstates,  # (batch, dim, cdiv(L, 8), NP) fp32: the state before every tile (states kernel)
    # (batch, NSEG, dim, NP) fp32 adjoint entering each segment from the right, or None; with
    # CARRY the local pass's segment adjoints from zero instead, carried here (``seg_dt``)
    seg_adj,
    seg_dt,  # (batch, NSEG, dim) fp32 sums of dt over the segments (CARRY), or None
    du,  # (batch, dim, L) out, u's dtype
    ddelta,  # (batch, dim, L) out, delta's dtype
    dz,  # (batch, dim, L) out, or None when z is None
    dAp,  # (batch, NSEG, dim, NP) fp32 per-(batch, segment) partial dA
    dBp,  # (dim / 8, batch, L, NP) fp32 per-block partial dB
    dCp,  # (dim / 8, batch, L, NP) fp32 per-block partial dC
    dDp,  # (batch, NSEG, dim) fp32 per-(batch, segment) partial dD, or None
    dbiasp,  # (batch, NSEG, dim) fp32 per-(batch, segment) partial ddelta_bias, or None
    dinit,  # (batch, dim, NP) fp32 gradient of the initial state
    dim,  # channels
    L,  # sequence length
    LP,  # steps of Bt / Ct
    G,  # groups of B / C
    NCK,  # checkpoint entries = cdiv(L, CK) + 1
    SEG,  # chunks per segment (program axis 2)
    SOFTPLUS: tl.constexpr,
    NP: tl.constexpr,  # 16
    CK: tl.constexpr,
    BLOCK_D: tl.constexpr,  # 8: one warp
    KL: tl.constexpr,  # 4 lanes a channel
    TPL: tl.constexpr,  # 2 steps a lane and tile
    HAS_D: tl.constexpr,
    HAS_Z: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_DLAST: tl.constexpr,
    HAS_SEG: tl.constexpr,
    EMU: tl.constexpr,  # the row shuffles by tl.gather (CPU tensors: the interpreter)
    PTX: tl.constexpr,  # inline PTX (shuffles, ``rcp``, the L1 prefetch); else portable ``tl``
    PREFETCH: tl.constexpr = True,  # the next tile's inputs loaded before this one computes
    PREFETCH_BC: tl.constexpr = True,  # the next tile's B_t / C_t prefetched into L1
    CARRY: tl.constexpr = False,  # fold the segments to the right here (no carry kernel)
):
    """Note [selective scan backward lanes]."""
    SPT: tl.constexpr = NP // KL
    TT: tl.constexpr = KL * TPL
    S3: tl.constexpr = (BLOCK_D, KL, SPT)
    T3: tl.constexpr = (BLOCK_D, KL, TPL)
    i_d = tl.program_id(0)
    i_b = tl.program_id(1).to(tl.int64)
    i_s = tl.program_id(2)
    NSEG = tl.num_programs(2)
    o_d = i_d * BLOCK_D + tl.arange(0, BLOCK_D)
    m_d = o_d < dim
    m_dn = m_d[:, None]
    o_n = tl.arange(0, NP)
    o_k = tl.arange(0, KL)
    o_j = (o_k[:, None] * TPL + tl.arange(0, TPL)[None, :])[None, :, :]  # (1, KL, TPL)
    o_dn = o_d[:, None] * NP + o_n[None, :]  # (BLOCK_D, NP) in a (dim, NP) buffer
    SZ = NP * dim

    b_A2 = tl.reshape(tl.load(A2 + o_dn, mask=m_dn, other=0.0), S3)
    b_D = tl.load(Dv + o_d, mask=m_d, other=0.0) if HAS_D else None
    b_bias = tl.load(delta_bias + o_d, mask=m_d, other=0.0) if HAS_BIAS else None
    row = (i_b * dim + o_d.to(tl.int64)) * L
    grp = (i_d * BLOCK_D) // (dim // G)  # a block never straddles two groups
    bc = (i_b * G + grp) * LP * NP
    p_B = Bt + bc + o_n
    p_C = Ct + bc + o_n
    part = (i_d.to(tl.int64) * tl.num_programs(1) + i_b) * L * NP
    # tile k's start state at p_ts + k * NP
    p_ts = tstates + (i_b * dim + o_d.to(tl.int64))[:, None] * (tl.cdiv(L, TT) * NP) + o_n[None, :]
    i_bs = i_b * NSEG + i_s

    if HAS_DLAST:
        G_adj = tl.reshape(tl.load(dlast + i_b * SZ + o_dn, mask=m_dn, other=0.0), S3)
    else:
        G_adj = tl.zeros(S3, dtype=tl.float32)
    if HAS_SEG and CARRY:  # the carry pass, here: G_{s-1} = exp(A sum dt_s) G_s + local_s
        G_adj = fold_segments(
            G_adj, seg_adj, seg_dt, b_A2, i_b, NSEG, NSEG - 1, NSEG - 1 - i_s, -1, dim, o_d, m_d
        )
    elif HAS_SEG:  # constexpr: seg_adj is None with one segment
        if i_s < NSEG - 1:
            G_adj = tl.reshape(tl.load(seg_adj + i_bs * SZ + o_dn, mask=m_dn, other=0.0), S3)
    # the sums over L: this chunk's (the _acc), then the segment's (Note [long sums])
    dA_acc = tl.zeros(S3, dtype=tl.float32)
    dD_acc = tl.zeros((BLOCK_D,), dtype=tl.float32)
    db_acc = tl.zeros((BLOCK_D,), dtype=tl.float32)
    dA_tot = tl.zeros(S3, dtype=tl.float32)
    dD_tot = tl.zeros((BLOCK_D,), dtype=tl.float32)
    db_tot = tl.zeros((BLOCK_D,), dtype=tl.float32)
    o_t = tl.arange(0, TT)

    c0 = i_s * SEG
    c1 = tl.minimum(c0 + SEG, NCK - 1)  # entry NCK - 1 is the final state, not a chunk
    k_beg = c0 * (CK // TT)
    k_end = tl.cdiv(tl.minimum(c1 * CK, L), TT)
    if PREFETCH:  # the last tile's inputs; each iteration then loads the next tile's (k - 1)
        nxt = _bwd_lane_loads(
            dout, u, delta, z, p_ts, row, m_dn, tl.maximum(k_end - 1, k_beg), L, NP, KL, TPL,
            HAS_Z,
        )  # fmt: skip
    for cc in range(0, c1 - c0):  # the segment's chunks in reverse, each one's tiles in reverse
        kc0 = (c1 - 1 - cc) * (CK // TT)
        kc1 = tl.minimum(kc0 + CK // TT, k_end)
        for kk in range(0, kc1 - kc0):
            k = kc1 - 1 - kk
            t0 = k * TT
            if PREFETCH_BC:  # the next tile's B_t / C_t rows toward L1
                _prefetch_bc_l1(
                    Bt, Ct, bc + tl.maximum(k - 1, k_beg) * TT * NP, BLOCK_D, KL, NP, PTX
                )
            if PREFETCH:
                cur = nxt
                # the segment's first tile loads itself again (a valid tile, never used)
                nxt = _bwd_lane_loads(
                    dout, u, delta, z, p_ts, row, m_dn, tl.maximum(k - 1, k_beg), L, NP, KL, TPL,
                    HAS_Z,
                )  # fmt: skip
            else:
                cur = _bwd_lane_loads(dout, u, delta, z, p_ts, row, m_dn, k, L, NP, KL, TPL, HAS_Z)
            hs, b_u, b_x, b_do, b_z = cur
            b_u = b_u.to(tl.float32)
            b_x = b_x.to(tl.float32)
            b_do = b_do.to(tl.float32)
            b_z = b_z.to(tl.float32)
            o_tt = t0 + o_t
            m2 = m_dn & (o_tt < L)[None, :]
            p = row[:, None] + o_tt[None, :]
            m = tl.reshape(m2, T3)
            # one pointer per row buffer and tile, step j at a constant offset from it
            q_B = p_B + t0 * NP
            q_C = p_C + t0 * NP
            q_dB = dBp + part + t0 * NP
            q_dC = dCp + part + t0 * NP
            Bs = ()
            Cs = ()
            for j in tl.static_range(TT):
                Bs = Bs + (tl.reshape(tl.load(q_B + j * NP), (1, KL, SPT)),)  # type: ignore[assignment]  # noqa: RUF005  (Triton tuples)
                Cs = Cs + (tl.reshape(tl.load(q_C + j * NP), (1, KL, SPT)),)  # type: ignore[assignment]  # noqa: RUF005  (Triton tuples)
            if HAS_BIAS:
                b_x += b_bias[:, None, None]  # type: ignore[index]  # None only when the flag is off
            if SOFTPLUS:
                b_dt = _softplus(b_x)
            else:
                b_dt = b_x
            b_dt = tl.where(m, b_dt, 0.0)  # padded steps: decay 1, input 0
            if HAS_Z:
                sig_z = _sigmoid(b_z, PTX)
                b_dy = b_do * b_z * sig_z
            else:
                b_dy = b_do
            b_dtu = b_dt * b_u
            # forward through the tile, keeping h_j and a_j; y_t and the dC_t partials
            h = hs
            h_all = ()
            a_all = ()
            dt_all = ()
            dtu_all = ()
            dy_all = ()
            b_y = tl.zeros_like(b_u)
            for j in tl.static_range(TT):
                dt_j = _lane_bcast(_slot(b_dt, j % TPL, TPL), o_k, j // TPL, KL, PTX)[:, :, None]
                dtu_j = _lane_bcast(_slot(b_dtu, j % TPL, TPL), o_k, j // TPL, KL, PTX)[:, :, None]
                dy_j = _lane_bcast(_slot(b_dy, j % TPL, TPL), o_k, j // TPL, KL, PTX)[:, :, None]
                a = tl.exp2(dt_j * b_A2)
                h = a * h + dtu_j * Bs[j]
                b_y = tl.where(o_j == j, _sum_states(h * Cs[j])[:, None, None], b_y)
                _store_rs8l(q_dC + j * NP, h * dy_j, t0 + j < L, EMU)
                h_all = h_all + (h,)  # type: ignore[assignment]  # noqa: RUF005  (Triton tuples)
                a_all = a_all + (a,)  # type: ignore[assignment]  # noqa: RUF005  (Triton tuples)
                dt_all = dt_all + (dt_j,)  # type: ignore[assignment]  # noqa: RUF005  (Triton tuples)
                dtu_all = dtu_all + (dtu_j,)  # type: ignore[assignment]  # noqa: RUF005  (Triton tuples)
                dy_all = dy_all + (dy_j,)  # type: ignore[assignment]  # noqa: RUF005  (Triton tuples)
            # the adjoint back through it: G = a_{t+1} g_{t+1} on entry of step t
            b_qA = tl.zeros_like(b_u)
            b_gB = tl.zeros_like(b_u)
            for jj in tl.static_range(TT):
                j = TT - 1 - jj  # (tuples are indexed by the constexpr expression itself)
                g = G_adj + Cs[TT - 1 - jj] * dy_all[TT - 1 - jj]
                ga = g * a_all[TT - 1 - jj]
                if jj == TT - 1:
                    q = ga * hs
                else:
                    q = ga * h_all[TT - 2 - jj]
                dA_acc += q * dt_all[TT - 1 - jj]
                b_qA = tl.where(o_j == j, _sum_states(q * b_A2)[:, None, None], b_qA)
                b_gB = tl.where(o_j == j, _sum_states(g * Bs[TT - 1 - jj])[:, None, None], b_gB)
                _store_rs8l(q_dB + j * NP, g * dtu_all[TT - 1 - jj], t0 + j < L, EMU)
                G_adj = ga
            b_ddt = b_qA * 0.6931471805599453 + b_u * b_gB  # A2 -> A
            b_du = b_dt * b_gB
            if HAS_D:
                b_du += b_D[:, None, None] * b_dy  # type: ignore[index]  # None only when the flag is off
                dD_acc += _sum_states(b_dy * b_u)
            if SOFTPLUS:
                b_ddt = b_ddt * _sigmoid(b_x, PTX)
            b_ddt = tl.where(m, b_ddt, 0.0)
            db_acc += _sum_states(b_ddt)
            tl.store(du + p, tl.reshape(b_du, (BLOCK_D, TT)).to(du.dtype.element_ty), mask=m2)
            tl.store(
                ddelta + p, tl.reshape(b_ddt, (BLOCK_D, TT)).to(ddelta.dtype.element_ty), mask=m2
            )
            if HAS_Z:
                if HAS_D:
                    b_y += b_D[:, None, None] * b_u  # type: ignore[index]  # None only when the flag is off
                b_dz = b_do * b_y * sig_z * (1.0 + b_z * (1.0 - sig_z))
                tl.store(dz + p, tl.reshape(b_dz, (BLOCK_D, TT)).to(dz.dtype.element_ty), mask=m2)
        # the chunk's sums into the segment's (Note [long sums])
        dA_tot, dD_tot, db_tot, dA_acc, dD_acc, db_acc = _fold_chunk_sums(
            dA_tot, dD_tot, db_tot, dA_acc, dD_acc, db_acc
        )
    G2 = tl.reshape(G_adj, (BLOCK_D, NP))
    if i_s == 0:
        tl.store(dinit + i_b * SZ + o_dn, G2, mask=m_dn)
    tl.store(dAp + i_bs * SZ + o_dn, tl.reshape(dA_tot, (BLOCK_D, NP)), mask=m_dn)
    if HAS_D:
        tl.store(dDp + i_bs * dim + o_d, dD_tot, mask=m_d)
    if HAS_BIAS:
        tl.store(dbiasp + i_bs * dim + o_d, db_tot, mask=m_d)


@triton.jit
def _states_adj_tile_lane(
    h,
    P,
    g,
    ins,
    b_do,
    b_A2,
    b_bias,
    m_d,
    o_k,
    o_j,
    t0,
    t_end,
    dt_sum,
    SOFTPLUS: tl.constexpr,
    KL: tl.constexpr,
    TPL: tl.constexpr,
    HAS_Z: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    PTX: tl.constexpr,
    BCAST_TILE: tl.constexpr = False,
):
    """The states kernel's tile with the segments' local adjoint (``ADJ``): the TT steps from t0
    of h <- a_t h + dt_t u_t B_t and, on the same a_t = exp2(dt_t A2), P <- a_t P (the decay
    from the segment's first step through t) and g <- g + P C_t dy_t (Note [selective scan
    segments]: the local pass's a_{t_beg} g_{t_beg} from zero, summed forward). Returns (h, P,
    g, dt_sum)."""
    TT: tl.constexpr = KL * TPL
    b_u, b_dt, b_z, Bs, Cs = ins
    b_u = b_u.to(tl.float32)
    b_dt = b_dt.to(tl.float32)
    m = m_d[:, None, None] & (t0 + o_j < t_end)
    if HAS_BIAS:
        b_dt += b_bias[:, None, None]
    if SOFTPLUS:
        b_dt = _softplus(b_dt)
    b_dt = tl.where(m, b_dt, 0.0)  # steps past the segment: decay 1, no input
    dt_sum += tl.sum(tl.sum(b_dt, axis=2), axis=1)
    b_du = b_dt * b_u
    b_dy = b_do.to(tl.float32)
    if HAS_Z:
        b_z = b_z.to(tl.float32)
        b_dy = b_dy * b_z * _sigmoid(b_z, PTX)
    b_dy = tl.where(m, b_dy, 0.0)
    ONE: tl.constexpr = BCAST_TILE and PTX and KL > 1  # ``_fwd_tile_lane``'s
    if ONE:
        bdts, bdus = _tile_bcast(b_dt, b_du, KL, TPL)
        bdys = _tile_bcast1(b_dy, KL, TPL)
    for j in tl.static_range(TT):
        if ONE:
            b_dtj = bdts[j][:, :, None]
            b_duj = bdus[j][:, :, None]
            b_dyj = bdys[j][:, :, None]
        else:
            b_dtj = _lane_bcast(_slot(b_dt, j % TPL, TPL), o_k, j // TPL, KL, PTX)[:, :, None]
            b_duj = _lane_bcast(_slot(b_du, j % TPL, TPL), o_k, j // TPL, KL, PTX)[:, :, None]
            b_dyj = _lane_bcast(_slot(b_dy, j % TPL, TPL), o_k, j // TPL, KL, PTX)[:, :, None]
        a = tl.exp2(b_dtj * b_A2)
        h = a * h + b_duj * Bs[j]
        P = P * a
        g += P * (Cs[j] * b_dyj)
    return h, P, g, dt_sum


@triton.jit
def _tile_load(x, row, m_d, t0, t_end, KL: tl.constexpr, TPL: tl.constexpr):
    """x's TT = KL * TPL steps from t0 as loaded, (BLOCK_D, KL, TPL) (0 past t_end)."""
    TT: tl.constexpr = KL * TPL
    o_tt = t0 + tl.arange(0, TT)
    m2 = m_d[:, None] & (o_tt < t_end)[None, :]
    p = row[:, None] + o_tt[None, :]
    return tl.reshape(tl.load(x + p, mask=m2, other=0.0), (row.shape[0], KL, TPL))


@triton.jit
def _selective_scan_bwd_lane_states_kernel(
    u,  # (batch, dim, L)
    delta,  # (batch, dim, L)
    A2,  # (dim, NP) fp32, A * log2(e)
    Bt,  # (batch, G, LP, NP) fp32, time-padded as the lane forward's
    delta_bias,  # (dim,) fp32 or None
    ckpt,  # (batch, dim, NCK, NP) fp32: the forward's checkpoints
    tstates,  # (batch, dim, cdiv(L, KL * TPL), NP) fp32 out: the state before every tile
    dim,  # channels
    L,  # sequence length
    LP,  # steps of Bt
    G,  # groups of B / C
    NCK,  # checkpoint entries = cdiv(L, CK) + 1
    SOFTPLUS: tl.constexpr,
    NP: tl.constexpr,
    CK: tl.constexpr,
    BLOCK_D: tl.constexpr,
    KL: tl.constexpr,
    TPL: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    # ADJ: one program per segment of SEG chunks, which also runs the backward's local adjoint
    # pass (Note [selective scan segments]) on the same exponentials; without, these are None
    dout,  # (batch, dim, L) gradient of out
    z,  # (batch, dim, L) or None
    Ct,  # (batch, G, LP, NP) fp32, time-padded
    seg_loc,  # (batch, NSEG, dim, NP) fp32 out: a_{t_beg} g_{t_beg} of each segment from zero
    seg_dt,  # (batch, NSEG, dim) fp32 out: sum of dt over each segment
    SEG,  # chunks per segment
    HAS_Z: tl.constexpr,
    ADJ: tl.constexpr,
    PTX: tl.constexpr,  # inline PTX (shuffles, ``rcp``); else portable ``tl`` code
    BCAST_TILE: tl.constexpr = False,  # the forward's
):
    """The split backward's states kernel (Note [selective scan backward split] in
    ``triton_bwd_split``) on the lane forward's tiles: one program per (channel block, batch,
    chunk) walks the chunk from its checkpoint and writes the state before each of its tiles.
    With ``ADJ`` a program walks a segment of SEG chunks from its first checkpoint and also
    gives the segment's local adjoint and dt sum (what ``_selective_scan_bwd_lane_local_kernel``
    gives, summed forward: one exp2 per (d, n, t) for both)."""
    SPT: tl.constexpr = NP // KL
    TT: tl.constexpr = KL * TPL
    i_d = tl.program_id(0)
    i_b = tl.program_id(1).to(tl.int64)
    o_d = i_d * BLOCK_D + tl.arange(0, BLOCK_D)
    m_d = o_d < dim
    m_dn = m_d[:, None]
    o_k = tl.arange(0, KL)
    o_n = tl.arange(0, NP)
    o_j = (o_k[:, None] * TPL + tl.arange(0, TPL)[None, :])[None, :, :]
    S3: tl.constexpr = (BLOCK_D, KL, SPT)
    o_dn = o_d[:, None] * NP + o_n[None, :]
    b_A2 = tl.reshape(tl.load(A2 + o_dn, mask=m_dn, other=0.0), S3)
    b_bias = tl.load(delta_bias + o_d, mask=m_d, other=0.0) if HAS_BIAS else None
    row = (i_b * dim + o_d.to(tl.int64)) * L
    grp = (i_d * BLOCK_D) // (dim // G)  # a block never straddles two groups
    p_B = Bt + (i_b * G + grp) * LP * NP + o_n
    if ADJ:
        c = tl.program_id(2) * SEG
        t_end = tl.minimum(tl.minimum(c + SEG, NCK - 1) * CK, L)
        p_C = Ct + (i_b * G + grp) * LP * NP + o_n
    else:
        c = tl.program_id(2)
        t_end = tl.minimum(c * CK + CK, L)
        p_C = p_B
    ch = (i_b * dim + o_d.to(tl.int64))[:, None]
    p_h = ckpt + ch * (NCK * NP) + c * NP + o_n[None, :]
    h = tl.reshape(tl.load(p_h, mask=m_dn, other=0.0), S3)
    p_ts = tstates + ch * (tl.cdiv(L, TT) * NP) + o_n[None, :]
    dt_sum = tl.zeros((BLOCK_D,), dtype=tl.float32)  # ADJ's output (unused without)
    P = tl.full(S3, 1.0, tl.float32)
    g = tl.zeros(S3, dtype=tl.float32)
    t_beg = c * CK
    nxt = _lane_loads(u, delta, z, p_B, p_C, row, m_d, t_beg, t_end, NP, KL, TPL, HAS_Z, not ADJ)
    nxt_do = _tile_load(dout, row, m_d, t_beg, t_end, KL, TPL) if ADJ else None
    for t0 in range(t_beg, t_end, TT):
        t0 = tl.multiple_of(t0, TT)
        tl.store(p_ts + (t0 // TT) * NP, tl.reshape(h, (BLOCK_D, NP)), mask=m_dn)
        ins = nxt
        nxt = _lane_loads(
            u, delta, z, p_B, p_C, row, m_d, t0 + TT, t_end, NP, KL, TPL, HAS_Z, not ADJ
        )
        if ADJ:
            b_do = nxt_do
            nxt_do = _tile_load(dout, row, m_d, t0 + TT, t_end, KL, TPL)
            h, P, g, dt_sum = _states_adj_tile_lane(
                h, P, g, ins, b_do, b_A2, b_bias, m_d, o_k, o_j, t0, t_end, dt_sum, SOFTPLUS, KL,
                TPL, HAS_Z, HAS_BIAS, PTX, BCAST_TILE,
            )  # fmt: skip
        else:
            h, dt_sum, _nB, _nC = _fwd_tile_lane(
                h,
                ins,
                b_A2,
                u,  # out: not written (LOCAL)
                b_bias,
                None,
                row,
                m_d,
                o_k,
                o_j,
                t0,
                t_end,
                dt_sum,
                SOFTPLUS,
                KL,
                TPL,
                False,
                False,
                HAS_BIAS,
                True,
                PTX,
                BCAST_TILE=BCAST_TILE,
            )
    if ADJ:
        i_bs = i_b * tl.num_programs(2) + tl.program_id(2)
        tl.store(seg_loc + i_bs * (NP * dim) + o_dn, tl.reshape(g, (BLOCK_D, NP)), mask=m_dn)
        tl.store(seg_dt + i_bs * dim + o_d, dt_sum, mask=m_d)
