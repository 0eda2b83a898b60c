"""The "split" kernels of ``ssmscan::selective_scan_bwd`` (CUDA, where ``plan.split_applies``): the forward's
layout. Since 2026-12-01 the default main kernel on this path is the lane one
(``triton_bwd_lane``); the split main kernel here is its fallback when the lane kernel fails its
layout check (the lane plan's fallback).

Note [selective scan backward split]
------------------------------------
Same math and recompute scheme as the other backward kernels (Note [selective scan backward] in
``triton_bwd``), with the layout of the forward (Note [selective scan forward layout]): a
channel's 16 states over 4 threads, state-contiguous (dim, NP) buffers (A2 and the forward's own
checkpoints, read without a transposed copy), (BLOCK_D, TT) tiles of u / delta / dout / z with
TT = 8 steps. One warp of 8 channels per program, so 4x the warps of ``tile_rs`` and far fewer
registers per channel.

* The states kernel (``_selective_scan_bwd_states_kernel``, the forward's tile without outputs,
  40 registers, one program per (channel block, batch, chunk): all chunks at once) walks each
  chunk from its checkpoint and writes the state before every tile, ``tstates`` (batch, dim,
  cdiv(L, 8), NP) fp32 (2x u's float32 size, freed after the backward). Then the main kernel
  visits its segment's tiles in reverse: the 8 states of the tile are recomputed from the tile's
  start state and *kept* (h_j and a_j), giving y_t and the dC_t partial on the way, and the
  adjoint runs back through them: two exp2 per (d, n, t), not three. (The chunk pass used to
  run inside the main kernel, serially before each chunk's reverse tiles, at the main kernel's
  8 warps per multiprocessor; as its own kernel it runs at full occupancy and in parallel over
  chunks: H200, 2026-12-01, whole fwd+bwd 5.59 -> 4.86 ms fp32 and 4.88 -> 4.48 ms bf16 at
  (8, 4096, 2048, 16), 2.21 -> 1.93 / 1.97 -> 1.80 ms at (16, 1536, 1024, 16), together with the
  softplus without log of ``triton_common``.)
* Since 2026-12-01 the states kernel runs on the lane forward's tiles
  (``triton_bwd_lane._selective_scan_bwd_lane_states_kernel``, Note [selective scan forward
  lanes]; the 2-D one here where that kernel fails its layout check): 43.8 -> 28.9 SASS
  instructions per step, and forward+backward 4.46 -> 4.18 ms fp32 / 4.29 -> 3.91 bf16 at (8,
  4096, 2048, 16) on the H200 (with the lane forward in both). The same shuffle broadcast in the
  main kernel below (a reshape of its [1, 2] x [8, 4] tiles) made Triton re-lay out the whole
  kernel (channels on lane bits 0-2: ``split_layout_check.py`` failed) and grew its loop from
  151 to 171 instructions per step: not done.
* Every B_t / C_t of a tile is loaded at the tile's start and shared by the recompute and the
  adjoint (the forward's lesson: loads in flight together).
* dB_t / dC_t over the warp's 8 channels: ``_rs8``, a reduce-scatter by butterfly shuffles
  (4 instead of tl.sum's 12, no shared memory), per-program partials (dim / 8 blocks of (batch,
  L, NP), summed by the launcher: deterministic, but 2 x dim / 8 x batch x L x 16 floats of
  temporary memory, 1.07 GB at (8, 4096, 2048)).

``_rs8``'s shuffles assume that the tensors they exchange put lane bits 2-4 on the channel bits
0-2 (one warp, threadsPerWarp [8, 4]). Triton chooses those layouts, and the choice depends on what
it knows at compile time: with L a multiple of 16 (and 16-byte aligned tensors) the (BLOCK_D, TT)
tiles get the [1, 2] x [8, 4] layout and the assumption holds; with L = 2040 they get [1, 1] x
[4, 8] and it does not; in the prototype at TT = 4 it did not either, and those gradients were
wrong on the GPU while the interpreter (which emulates the shuffles with ``tl.gather``, ``EMU``)
passed. Hence ``plan.split_applies``: NP = 16, TT = 8, channels per group a multiple of 8, and on the GPU L a
multiple of 16 that Triton can see (a concrete int: a symbolic L under torch.compile(dynamic=True)
reaches the kernel without its divisibility, so the split kernel is not used there) and aligned
tensors; ``tile_rs`` otherwise. ``tests/ops/selective_scan/
split_layout_check.py`` compiles the kernel for sm_90 (no GPU needed) under those
specializations, in every dtype and flag set, and checks the shuffled tensors' layouts (with
L = 2040 as a negative control). The check agrees with the GPU on the two prototype kernels it
ran: it flags the TT = 4 one (wrong gradients on the H200) and passes the TT = 8 one (correct).
The state-shaped buffers read or written once (dlast, the
segments' adjoints, dA partials, dinitial_state) are (dim, NP) here too, as in the prototype, so
that no access pulls the states toward the channel-contiguous layout.

H200, 2026-11-30 (the prototype of this kernel, whole backward op, ms): 4.65 vs 5.25 (``tile_rs``) fp32 and 3.97 vs 4.96 bf16 at (8, 4096, 2048, 16);
1.78 vs 2.22 / 1.55 vs 2.11 at (16, 1536, 1024, 16). 2026-12-01, this library kernel (with the
chunk pass still inside) on the H200 beside ``tile_rs`` in one process: correct against float64
in fp32 / bf16 / fp16 (fp32 out 7.9e-7, worst gradient dA 5.9e-6;
bf16 worst dB 3.2e-3), backward op 4.73 vs 5.30 ms fp32 and 4.06 vs 4.95 bf16 at (8, 4096, 2048),
1.82 vs 2.24 / 1.59 vs 2.13 at (16, 1536, 1024), 6.09 vs 7.63 / 5.41 vs 6.86 at (1, 1024, 65536):
the default since. Register caps (``maxnreg`` 200 / 168, ``benchmarks/selective_scan/
tune_regs.py``) were slower at every row but the host-bound batch-1 bf16 one: the spills cost
more than the extra warps gain.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ssmscan.ops.selective_scan.triton_common import (
    _bfly,
    _fold_chunk_sums,
    _sigmoid,
    _tile_inputs,
    _tile_offsets,
)
from ssmscan.ops.selective_scan.triton_fwd import _col, _fwd_tile


@triton.jit
def _bfly_rows(x, MASK: tl.constexpr, EMU: tl.constexpr):
    """Rows ``d ^ (MASK // 4)`` of x: on the GPU the value lane ``laneid ^ MASK`` holds
    (``shfl.sync.bfly``; lane bits 2-4 are the row bits 0-2); EMU (interpreter: no inline PTX)
    the same rows by ``tl.gather``."""
    if EMU:
        d = tl.arange(0, x.shape[0])[:, None] ^ (MASK // 4)
        return tl.gather(x, tl.broadcast_to(d, x.shape), axis=0)
    return _bfly(x, MASK)


@triton.jit
def _rs8(x, BLOCK_D: tl.constexpr, NP: tl.constexpr, EMU: tl.constexpr):
    """Sum of the (8, 16) x over its 8 rows (channels), scattered: (8, 4) r with r[d, j] the total
    for state 8 (d & 1) + 2 j + ((d >> 1) & 1) (rows d and d ^ 4 hold the same). Everything but
    the shuffles is logical indices, so layout conversions elsewhere cannot break it."""
    d = tl.arange(0, BLOCK_D)[:, None]
    a, b = tl.split(tl.permute(tl.reshape(x, (BLOCK_D, 2, NP // 2)), (0, 2, 1)))  # n < 8, >= 8
    hi = (d & 1) == 1
    x = tl.where(hi, b, a) + _bfly_rows(tl.where(hi, a, b), 4, EMU)  # n = 8 (d & 1) + i
    a, b = tl.split(tl.reshape(x, (BLOCK_D, NP // 4, 2)))  # even / odd i
    hi = ((d >> 1) & 1) == 1
    x = tl.where(hi, b, a) + _bfly_rows(tl.where(hi, a, b), 8, EMU)  # n = 8 (d&1) + 2j + (d>>1)&1
    return x + _bfly_rows(x, 16, EMU)


@triton.jit
def _store_sum8(base, x, m, BLOCK_D: tl.constexpr, NP: tl.constexpr, EMU: tl.constexpr):
    """base[n] = sum over the 8 rows of x[:, n] (``_rs8``), each n stored once, if m."""
    r = _rs8(x, BLOCK_D, NP, EMU)
    d = tl.arange(0, BLOCK_D)[:, None]
    j = tl.arange(0, NP // 4)[None, :]
    n = 8 * (d & 1) + 2 * j + ((d >> 1) & 1)
    tl.store(base + n, r, mask=(d < 4) & m)


@triton.jit
def _selective_scan_bwd_states_kernel(
    u,  # (batch, dim, L)
    delta,  # (batch, dim, L)
    A2,  # (dim, NP) fp32, A * log2(e)
    Bt,  # (batch, G, L, NP) fp32
    delta_bias,  # (dim,) fp32 or None
    ckpt,  # (batch, dim, NCK, NP) fp32: the forward's checkpoints
    tstates,  # (batch, dim, cdiv(L, TT), NP) fp32 out: the state before every tile
    dim,  # channels
    L,  # sequence length
    G,  # groups of B / C
    NCK,  # checkpoint entries = cdiv(L, CK) + 1
    SOFTPLUS: tl.constexpr,
    NP: tl.constexpr,
    CK: tl.constexpr,
    BLOCK_D: tl.constexpr,  # the forward's block (``plan.fwd_block_channels``)
    HAS_BIAS: tl.constexpr,
    TT: tl.constexpr,  # 8, divides CK
):
    """Note [selective scan backward split]: one program per (channel block, batch, chunk) walks
    the chunk forward from its checkpoint (the forward's tile, ``_fwd_tile`` without outputs) and
    writes the state before each of its tiles."""
    i_d = tl.program_id(0)
    i_b = tl.program_id(1).to(tl.int64)
    c = tl.program_id(2)
    o_d = i_d * BLOCK_D + tl.arange(0, BLOCK_D)
    m_d = o_d < dim
    o_n = tl.arange(0, NP)
    o_dn = o_d[:, None] * NP + o_n[None, :]
    b_A2 = tl.load(A2 + o_dn, mask=m_d[:, None], other=0.0)
    b_bias = tl.load(delta_bias + o_d, mask=m_d, other=0.0) if HAS_BIAS else None
    row = (i_b * dim + o_d.to(tl.int64)) * L
    grp = (i_d * BLOCK_D) // (dim // G)  # a block never straddles two groups
    p_B = Bt + (i_b * G + grp) * L * NP + o_n
    ch = (i_b * dim + o_d.to(tl.int64))[:, None]
    h = tl.load(ckpt + ch * (NCK * NP) + c * NP + o_n[None, :], mask=m_d[:, None], other=0.0)
    p_ts = tstates + ch * (tl.cdiv(L, TT) * NP) + o_n[None, :]
    o_t = tl.arange(0, TT)
    dt_sum = tl.zeros((BLOCK_D,), dtype=tl.float32)  # unused (the tile's LOCAL output)
    t_end = tl.minimum(c * CK + CK, L)
    for t0 in range(c * CK, t_end, TT):
        t0 = tl.multiple_of(t0, TT)
        tl.store(p_ts + (t0 // TT) * NP, h, mask=m_d[:, None])
        h, dt_sum = _fwd_tile(
            h,
            b_A2,
            u,
            delta,
            u,  # z: not read (LOCAL)
            u,  # out: not written (LOCAL)
            b_bias,
            None,
            p_B,
            p_B,  # C: not read (LOCAL)
            row,
            m_d,
            t0,
            t_end,
            o_t,
            dt_sum,
            SOFTPLUS,
            NP,
            TT,
            False,
            False,
            HAS_BIAS,
            True,
            False,  # PTX: not needed (no gate)
        )


@triton.jit
def _selective_scan_bwd_split_kernel(
    dout,  # (batch, dim, L) gradient of out, u's dtype
    dlast,  # (batch, dim, NP) fp32 gradient of the last state, or None
    u,  # (batch, dim, L)
    delta,  # (batch, dim, L)
    A2,  # (dim, NP) fp32, A * log2(e)
    Bt,  # (batch, G, L, NP) fp32
    Ct,  # (batch, G, L, NP) fp32
    Dv,  # (dim,) fp32 or None
    z,  # (batch, dim, L) or None
    delta_bias,  # (dim,) fp32 or None
    tstates,  # (batch, dim, cdiv(L, TT), NP) fp32: the state before every tile (states kernel)
    seg_adj,  # (batch, NSEG, dim, NP) fp32 adjoint entering each segment from the right, or None
    du,  # (batch, dim, L) out, u's dtype
    ddelta,  # (batch, dim, L) out, delta's dtype
    dz,  # (batch, dim, L) out, or None when z is None
    dAp,  # (batch, NSEG, dim, NP) fp32 per-(batch, segment) partial dA
    dBp,  # (dim / BLOCK_D, batch, L, NP) fp32 per-block partial dB
    dCp,  # (dim / BLOCK_D, batch, L, NP) fp32 per-block partial dC
    dDp,  # (batch, NSEG, dim) fp32 per-(batch, segment) partial dD, or None
    dbiasp,  # (batch, NSEG, dim) fp32 per-(batch, segment) partial ddelta_bias, or None
    dinit,  # (batch, dim, NP) fp32 gradient of the initial state
    dim,  # channels
    L,  # sequence length
    G,  # groups of B / C
    NCK,  # checkpoint entries = cdiv(L, CK) + 1
    SEG,  # chunks per segment (program axis 2)
    SOFTPLUS: tl.constexpr,
    NP: tl.constexpr,  # 16
    CK: tl.constexpr,
    BLOCK_D: tl.constexpr,  # 8: one warp
    HAS_D: tl.constexpr,
    HAS_Z: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_DLAST: tl.constexpr,
    HAS_SEG: tl.constexpr,
    TT: tl.constexpr,  # 8
    EMU: tl.constexpr,  # ``_rs8``'s shuffles by tl.gather (CPU tensors: the interpreter)
    PTX: tl.constexpr,  # inline PTX (``rcp``); else portable ``tl`` code
):
    """Note [selective scan backward split]."""
    i_d = tl.program_id(0)
    i_b = tl.program_id(1).to(tl.int64)
    i_s = tl.program_id(2)
    NSEG = tl.num_programs(2)
    o_d = i_d * BLOCK_D + tl.arange(0, BLOCK_D)
    m_d = o_d < dim
    m_d2 = m_d[:, None]
    o_n = tl.arange(0, NP)
    # every state-shaped buffer (dim, NP): an (NP, dim) one, even read once, changed the layouts
    # Triton chose for the whole kernel (and broke ``_rs8``'s assumption)
    o_dn = o_d[:, None] * NP + o_n[None, :]
    SZ = NP * dim

    b_A2 = tl.load(A2 + o_dn, mask=m_d2, other=0.0)
    b_D = tl.load(Dv + o_d, mask=m_d, other=0.0) if HAS_D else None
    b_bias = tl.load(delta_bias + o_d, mask=m_d, other=0.0) if HAS_BIAS else None
    row = (i_b * dim + o_d.to(tl.int64)) * L
    grp = (i_d * BLOCK_D) // (dim // G)  # a block never straddles two groups
    bc = (i_b * G + grp) * L * NP
    p_B = Bt + bc + o_n
    p_C = Ct + bc + o_n
    part = (i_d.to(tl.int64) * tl.num_programs(1) + i_b) * L * NP
    # tile k's start state at p_ts + k * NP
    p_ts = tstates + (i_b * dim + o_d.to(tl.int64))[:, None] * (tl.cdiv(L, TT) * NP) + o_n[None, :]
    i_bs = i_b * NSEG + i_s

    if HAS_DLAST:
        G_adj = tl.load(dlast + i_b * SZ + o_dn, mask=m_d2, other=0.0)
    else:
        G_adj = tl.zeros((BLOCK_D, NP), dtype=tl.float32)
    if HAS_SEG:  # constexpr: seg_adj is None with one segment
        if i_s < NSEG - 1:
            G_adj = tl.load(seg_adj + i_bs * SZ + o_dn, mask=m_d2, other=0.0)
    # the sums over L: this chunk's (the _acc), then the segment's (Note [long sums])
    dA_acc = tl.zeros((BLOCK_D, NP), dtype=tl.float32)
    dD_acc = tl.zeros((BLOCK_D,), dtype=tl.float32)
    db_acc = tl.zeros((BLOCK_D,), dtype=tl.float32)
    dA_tot = tl.zeros((BLOCK_D, NP), dtype=tl.float32)
    dD_tot = tl.zeros((BLOCK_D,), dtype=tl.float32)
    db_tot = tl.zeros((BLOCK_D,), dtype=tl.float32)
    o_t = tl.arange(0, TT)

    c0 = i_s * SEG
    c1 = tl.minimum(c0 + SEG, NCK - 1)  # entry NCK - 1 is the final state, not a chunk
    k_end = tl.cdiv(tl.minimum(c1 * CK, L), TT)
    for cc in range(0, c1 - c0):  # the segment's chunks in reverse, each one's tiles in reverse
        kc0 = (c1 - 1 - cc) * (CK // TT)
        kc1 = tl.minimum(kc0 + CK // TT, k_end)
        for kk in range(0, kc1 - kc0):
            k = kc1 - 1 - kk
            t0 = k * TT
            hs = tl.load(p_ts + k * NP, mask=m_d2, other=0.0)
            m, p = _tile_offsets(row, m_d, o_t, t0, L)
            b_u, b_x, b_dt, b_do, b_z, sig_z, b_dy = _tile_inputs(
                u, delta, dout, z, m, p, b_bias, SOFTPLUS, HAS_Z, HAS_BIAS, PTX
            )
            b_dtu = b_dt * b_u
            Bs = ()
            Cs = ()
            for j in tl.static_range(TT):
                Bs = Bs + (tl.load(p_B + (t0 + j) * NP, mask=t0 + j < L, other=0.0),)  # type: ignore[assignment]  # noqa: RUF005  (Triton tuples)
                Cs = Cs + (tl.load(p_C + (t0 + j) * NP, mask=t0 + j < L, other=0.0),)  # type: ignore[assignment]  # noqa: RUF005  (Triton tuples)
            # forward through the tile, keeping h_j and a_j; y_t and the dC_t partials
            h = hs
            h_all = ()
            a_all = ()
            b_y = tl.zeros_like(b_u)
            for j in tl.static_range(TT):
                a = tl.exp2(_col(b_dt, o_t, j)[:, None] * b_A2)
                h = a * h + _col(b_dtu, o_t, j)[:, None] * Bs[j][None, :]
                b_y = tl.where(o_t[None, :] == j, tl.sum(h * Cs[j][None, :], axis=1)[:, None], b_y)
                dy_j = _col(b_dy, o_t, j)
                _store_sum8(
                    dCp + part + (t0 + j) * NP, h * dy_j[:, None], t0 + j < L, BLOCK_D, NP, EMU
                )
                h_all = h_all + (h,)  # type: ignore[assignment]  # noqa: RUF005  (Triton tuples)
                a_all = a_all + (a,)  # type: ignore[assignment]  # noqa: RUF005  (Triton tuples)
            # the adjoint back through it: G = a_{t+1} g_{t+1} on entry of step t
            b_qA = tl.zeros_like(b_u)
            b_gB = tl.zeros_like(b_u)
            for jj in tl.static_range(TT):
                j = TT - 1 - jj
                b_dtj = _col(b_dt, o_t, j)
                g = G_adj + Cs[TT - 1 - jj][None, :] * _col(b_dy, o_t, j)[:, None]
                ga = g * a_all[TT - 1 - jj]
                if jj == TT - 1:
                    q = ga * hs
                else:
                    q = ga * h_all[TT - 2 - jj]
                dA_acc += q * b_dtj[:, None]
                b_qA = tl.where(o_t[None, :] == j, tl.sum(q * b_A2, axis=1)[:, None], b_qA)
                b_gB = tl.where(
                    o_t[None, :] == j, tl.sum(g * Bs[TT - 1 - jj][None, :], axis=1)[:, None], b_gB
                )
                _store_sum8(
                    dBp + part + (t0 + j) * NP,
                    g * _col(b_dtu, o_t, j)[:, None],
                    t0 + j < L,
                    BLOCK_D,
                    NP,
                    EMU,
                )
                G_adj = ga
            b_ddt = b_qA * 0.6931471805599453 + b_u * b_gB  # A2 -> A
            b_du = b_dt * b_gB
            if HAS_D:
                b_du += b_D[:, None] * b_dy  # type: ignore[index]  # None only when the flag is off
                dD_acc += tl.sum(b_dy * b_u, axis=1)
            if SOFTPLUS:
                b_ddt = b_ddt * _sigmoid(b_x, PTX)
            b_ddt = tl.where(m, b_ddt, 0.0)
            db_acc += tl.sum(b_ddt, axis=1)
            tl.store(du + p, b_du.to(du.dtype.element_ty), mask=m)
            tl.store(ddelta + p, b_ddt.to(ddelta.dtype.element_ty), mask=m)
            if HAS_Z:
                if HAS_D:
                    b_y += b_D[:, None] * b_u  # type: ignore[index]  # None only when the flag is off
                b_dz = b_do * b_y * sig_z * (1.0 + b_z * (1.0 - sig_z))
                tl.store(dz + p, b_dz.to(dz.dtype.element_ty), mask=m)
        # the chunk's sums into the segment's (Note [long sums])
        dA_tot, dD_tot, db_tot, dA_acc, dD_acc, db_acc = _fold_chunk_sums(
            dA_tot, dD_tot, db_tot, dA_acc, dD_acc, db_acc
        )
    if i_s == 0:
        tl.store(dinit + i_b * SZ + o_dn, G_adj, mask=m_d2)
    tl.store(dAp + i_bs * SZ + o_dn, dA_tot, mask=m_d2)
    if HAS_D:
        tl.store(dDp + i_bs * dim + o_d, dD_tot, mask=m_d)
    if HAS_BIAS:
        tl.store(dbiasp + i_bs * dim + o_d, db_tot, mask=m_d)


def _aligned(t: torch.Tensor) -> bool:
    """16-byte aligned data: the pointer in eager; under tracing (fake tensors, no pointer) the
    storage offset, which is what Inductor's own alignment assumption looks at (it copies inputs
    that break it at run time)."""
    if type(t) in (torch.Tensor, torch.nn.Parameter) and t.device.type != "meta":
        return t.data_ptr() % 16 == 0  # eager: no is_fake (host time of batch-1 calls)
    from torch._subclasses.fake_tensor import is_fake

    if is_fake(t) or t.device.type == "meta":
        return (t.storage_offset() * t.element_size()) % 16 == 0
    return t.data_ptr() % 16 == 0
