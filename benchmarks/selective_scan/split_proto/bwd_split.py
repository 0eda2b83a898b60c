"""Prototype: the backward with the forward's layout (a channel's states spread over NP / 4
threads, state-contiguous (dim, NP) buffers, (BLOCK_D, TT) tiles); one segment, no initial state,
no dlast_state, G = 1, D / z / delta_bias given. Note [selective scan backward] for the math.

Per chunk: a forward pass from the checkpoint writes the state at every tile start to a
per-program scratch; then the tiles in reverse: TT states recomputed and *kept* (h_j and a_j, so
two exp2 per (d, n, t) instead of three), y / dC_t on the way forward, the adjoint on the way back.
dB_t / dC_t: ``tl.sum`` over the block's channels, per-program partials."""

import torch
import triton
import triton.language as tl

from ssmscan.ops.common.triton_launch import launcher
from ssmscan.ops.selective_scan.triton_common import LOG2E, _bfly, _sigmoid, _softplus
from ssmscan.ops.selective_scan.triton_fwd import _col


@triton.jit
def _swap_rows(x, MASK: tl.constexpr, EMU: tl.constexpr):
    """x[d ^ (MASK // 4)]: on the GPU the lane ``laneid ^ MASK``'s x (lane bits 2-4 are row bits
    0-2, ``_rs8``); EMU (the interpreter, no inline PTX) the same rows by ``tl.gather``."""
    if EMU:
        d = tl.arange(0, x.shape[0])[:, None] ^ (MASK // 4)
        return tl.gather(x, tl.broadcast_to(d, x.shape), axis=0)
    else:
        return _bfly(x, MASK)


@triton.jit
def _rs8(x, BLOCK_D: tl.constexpr, NP: tl.constexpr, EMU: tl.constexpr):
    """Sum of the (BLOCK_D = 8, NP = 16) x over its 8 rows (channels), scattered: r (8, 4) with
    r[d, j] = the total for state 8 (d & 1) + 2 j + ((d >> 1) & 1) (rows d and d ^ 4 equal).
    4 shuffles (``_bfly``) instead of tl.sum's 12. The one physical assumption: the shuffled
    tensors' layouts put lane bits 2-4 on row bits 0-2 (one warp, threadsPerWarp [8, 4]; checked
    in the TTGIR: #linear / #linear1). Everything else is logical indices, so layout conversions
    Triton inserts elsewhere (the store) cannot break it."""
    d = tl.arange(0, BLOCK_D)[:, None]
    a, b = tl.split(tl.permute(tl.reshape(x, (BLOCK_D, 2, NP // 2)), (0, 2, 1)))  # n < 8, >= 8
    hi = (d & 1) == 1
    x = tl.where(hi, b, a) + _swap_rows(tl.where(hi, a, b), 4, EMU)  # (8, 8): n = 8 (d & 1) + i
    a, b = tl.split(tl.reshape(x, (BLOCK_D, NP // 4, 2)))  # even / odd i
    hi = ((d >> 1) & 1) == 1
    x = tl.where(hi, b, a) + _swap_rows(
        tl.where(hi, a, b), 8, EMU
    )  # (8, 4): n = 8 (d & 1) + 2 j + bit 1
    return x + _swap_rows(x, 16, EMU)


@triton.jit
def _store_rs8(base, x, m, BLOCK_D: tl.constexpr, NP: tl.constexpr, EMU: tl.constexpr):
    """base[n] = sum over the 8 rows of x[:, n] (``_rs8``), each n stored once."""
    r = _rs8(x, BLOCK_D, NP, EMU)
    d = tl.arange(0, BLOCK_D)[:, None]
    j = tl.arange(0, NP // 4)[None, :]
    n = 8 * (d & 1) + 2 * j + ((d >> 1) & 1)
    tl.store(base + n, r, mask=(d < 4) & m)


@triton.jit
def bwd_split_kernel(
    dout,
    u,
    delta,
    A2,  # (dim, NP) fp32
    Bt,  # (batch, L, NP) fp32
    Ct,
    Dv,
    z,
    delta_bias,
    ckpt,  # (batch, dim, NCK, NP) fp32: the forward's own output
    scratch,  # (batch * nblk, CK // TT, BLOCK_D, NP) fp32
    du,
    ddelta,
    dz,
    dAp,  # (batch, dim, NP) fp32
    dBp,  # (nblk, batch, L, NP) fp32
    dCp,
    dDp,  # (batch, dim) fp32
    dbp,
    dim,
    L,
    NCK,
    NP: tl.constexpr,
    CK: tl.constexpr,
    BLOCK_D: tl.constexpr,
    TT: tl.constexpr,
    KEEP_A: tl.constexpr = True,  # keep a_j from the recompute (else a third exp2)
    RS: tl.constexpr = False,  # dB_t / dC_t by _rs8 (BLOCK_D 8, one warp, NP 16; GPU only)
    PF: tl.constexpr = False,  # every B_t / C_t of a tile loaded at its start (and shared)
    EMU: tl.constexpr = False,  # RS's shuffles emulated by tl.gather (interpreter)
):
    NT: tl.constexpr = CK // TT
    i_d = tl.program_id(0)
    i_b = tl.program_id(1).to(tl.int64)
    nb = tl.num_programs(1)
    o_d = i_d * BLOCK_D + tl.arange(0, BLOCK_D)
    m_d = o_d < dim
    o_n = tl.arange(0, NP)
    o_dn = o_d[:, None] * NP + o_n[None, :]
    m_d2 = m_d[:, None]
    b_A2 = tl.load(A2 + o_dn, mask=m_d2, other=0.0)
    b_D = tl.load(Dv + o_d, mask=m_d, other=0.0)
    b_bias = tl.load(delta_bias + o_d, mask=m_d, other=0.0)
    row = (i_b * dim + o_d.to(tl.int64)) * L
    bc = i_b * L * NP
    p_B = Bt + bc + o_n
    p_C = Ct + bc + o_n
    part = (i_d.to(tl.int64) * nb + i_b) * L * NP
    p_dB = dBp + part + o_n
    p_dC = dCp + part + o_n
    p_ck = ckpt + (i_b * dim + o_d.to(tl.int64))[:, None] * (NCK * NP) + o_n[None, :]
    p_sc = (
        scratch
        + (i_b * tl.num_programs(0) + i_d) * (NT * BLOCK_D * NP)
        + (tl.arange(0, BLOCK_D)[:, None] * NP + o_n[None, :])
    )
    G = tl.zeros((BLOCK_D, NP), dtype=tl.float32)
    dA_acc = tl.zeros((BLOCK_D, NP), dtype=tl.float32)
    dD_acc = tl.zeros((BLOCK_D,), dtype=tl.float32)
    db_acc = tl.zeros((BLOCK_D,), dtype=tl.float32)
    o_t = tl.arange(0, TT)
    NC = NCK - 1
    for cc in range(0, NC):
        c = NC - 1 - cc
        t_beg = c * CK
        n_tiles = (tl.minimum(t_beg + CK, L) - t_beg + TT - 1) // TT
        tl.debug_barrier()
        h = tl.load(p_ck + c * NP, mask=m_d2, other=0.0)
        for k in range(0, n_tiles - 1):
            t0 = t_beg + TT * k
            tl.store(p_sc + k * (BLOCK_D * NP), h)
            o_tt = t0 + o_t
            m = m_d[:, None] & (o_tt < L)[None, :]
            p = row[:, None] + o_tt[None, :]
            b_u = tl.load(u + p, mask=m, other=0.0).to(tl.float32)
            b_dt = tl.load(delta + p, mask=m, other=0.0).to(tl.float32)
            b_dt = tl.where(m, _softplus(b_dt + b_bias[:, None]), 0.0)
            b_dtu = b_dt * b_u
            Bs = ()
            if PF:
                for j in tl.static_range(TT):
                    Bs = Bs + (tl.load(p_B + (t0 + j) * NP, mask=t0 + j < L, other=0.0),)  # noqa: RUF005
            for j in tl.static_range(TT):
                if PF:
                    b_B = Bs[j]
                else:
                    b_B = tl.load(p_B + (t0 + j) * NP, mask=t0 + j < L, other=0.0)
                b_dtj = _col(b_dt, o_t, j)
                h = tl.exp2(b_dtj[:, None] * b_A2) * h + _col(b_dtu, o_t, j)[:, None] * b_B[None, :]
        tl.store(p_sc + (n_tiles - 1) * (BLOCK_D * NP), h)
        tl.debug_barrier()
        for kk in range(0, n_tiles):
            k = n_tiles - 1 - kk
            t0 = t_beg + TT * k
            hs = tl.load(p_sc + k * (BLOCK_D * NP))
            o_tt = t0 + o_t
            m = m_d[:, None] & (o_tt < L)[None, :]
            p = row[:, None] + o_tt[None, :]
            b_u = tl.load(u + p, mask=m, other=0.0).to(tl.float32)
            b_x = tl.load(delta + p, mask=m, other=0.0).to(tl.float32) + b_bias[:, None]
            b_dt = tl.where(m, _softplus(b_x), 0.0)
            b_do = tl.load(dout + p, mask=m, other=0.0).to(tl.float32)
            b_z = tl.load(z + p, mask=m, other=0.0).to(tl.float32)
            sig_z = _sigmoid(b_z)
            b_dy = b_do * b_z * sig_z
            b_dtu = b_dt * b_u
            # forward through the tile, keeping h_j (and a_j)
            Bs = ()
            Cs = ()
            if PF:
                for j in tl.static_range(TT):
                    Bs = Bs + (tl.load(p_B + (t0 + j) * NP, mask=t0 + j < L, other=0.0),)  # noqa: RUF005
                    Cs = Cs + (tl.load(p_C + (t0 + j) * NP, mask=t0 + j < L, other=0.0),)  # noqa: RUF005
            h = hs
            h_all = ()
            a_all = ()
            b_y = tl.zeros_like(b_u)
            for j in tl.static_range(TT):
                m_j = t0 + j < L
                if PF:
                    b_B = Bs[j]
                    b_C = Cs[j]
                else:
                    b_B = tl.load(p_B + (t0 + j) * NP, mask=m_j, other=0.0)
                    b_C = tl.load(p_C + (t0 + j) * NP, mask=m_j, other=0.0)
                a = tl.exp2(_col(b_dt, o_t, j)[:, None] * b_A2)
                h = a * h + _col(b_dtu, o_t, j)[:, None] * b_B[None, :]
                b_y = tl.where(o_t[None, :] == j, tl.sum(h * b_C[None, :], axis=1)[:, None], b_y)
                dy_j = _col(b_dy, o_t, j)
                if RS:
                    _store_rs8(dCp + part + (t0 + j) * NP, h * dy_j[:, None], m_j, BLOCK_D, NP, EMU)
                else:
                    tl.store(p_dC + (t0 + j) * NP, tl.sum(h * dy_j[:, None], axis=0), mask=m_j)
                h_all = h_all + (h,)  # noqa: RUF005  (Triton tuples)
                if KEEP_A:
                    a_all = a_all + (a,)  # noqa: RUF005
            # the adjoint back through it
            b_qA = tl.zeros_like(b_u)
            b_gB = tl.zeros_like(b_u)
            for jj in tl.static_range(TT):
                j = TT - 1 - jj
                m_j = t0 + j < L
                if PF:
                    b_B = Bs[TT - 1 - jj]
                    b_C = Cs[TT - 1 - jj]
                else:
                    b_B = tl.load(p_B + (t0 + j) * NP, mask=m_j, other=0.0)
                    b_C = tl.load(p_C + (t0 + j) * NP, mask=m_j, other=0.0)
                b_dtj = _col(b_dt, o_t, j)
                g = G + b_C[None, :] * _col(b_dy, o_t, j)[:, None]
                if KEEP_A:
                    ga = g * a_all[TT - 1 - jj]
                else:
                    ga = g * tl.exp2(b_dtj[:, None] * b_A2)
                if j == 0:
                    q = ga * hs
                else:
                    q = ga * h_all[TT - 2 - jj]
                dA_acc += q * b_dtj[:, None]
                b_qA = tl.where(o_t[None, :] == j, tl.sum(q * b_A2, axis=1)[:, None], b_qA)
                b_gB = tl.where(o_t[None, :] == j, tl.sum(g * b_B[None, :], axis=1)[:, None], b_gB)
                dtu_j = _col(b_dtu, o_t, j)
                if RS:
                    _store_rs8(
                        dBp + part + (t0 + j) * NP, g * dtu_j[:, None], m_j, BLOCK_D, NP, EMU
                    )
                else:
                    tl.store(p_dB + (t0 + j) * NP, tl.sum(g * dtu_j[:, None], axis=0), mask=m_j)
                G = ga
            b_ddt = b_qA * 0.6931471805599453 + b_u * b_gB
            b_du = b_dt * b_gB + b_D[:, None] * b_dy
            dD_acc += tl.sum(b_dy * b_u, axis=1)
            b_ddt = tl.where(m, b_ddt * _sigmoid(b_x), 0.0)
            db_acc += tl.sum(b_ddt, axis=1)
            tl.store(du + p, b_du.to(du.dtype.element_ty), mask=m)
            tl.store(ddelta + p, b_ddt.to(ddelta.dtype.element_ty), mask=m)
            b_y += b_D[:, None] * b_u
            b_dz = b_do * b_y * sig_z * (1.0 + b_z * (1.0 - sig_z))
            tl.store(dz + p, b_dz.to(dz.dtype.element_ty), mask=m)
    tl.store(dAp + (i_b * dim + o_d.to(tl.int64))[:, None] * NP + o_n[None, :], dA_acc, mask=m_d2)
    tl.store(dDp + i_b * dim + o_d, dD_acc, mask=m_d)
    tl.store(dbp + i_b * dim + o_d, db_acc, mask=m_d)


def run(
    dout,
    u,
    delta,
    A,
    B,
    C,
    D,
    z,
    delta_bias,
    ckpt,
    BLOCK_D=8,
    warps=1,
    TT=8,
    KEEP_A=True,
    RS=False,
    PF=False,
    reduce=True,
):
    """(du, ddelta, dA, dB, dC, dD, dz, ddelta_bias); ckpt the forward's (batch, dim, NCK, 16)."""
    batch, dim, L = u.shape
    N = A.shape[1]
    assert N == 16 and B.dim() == 3
    NP, CK = 16, 256
    NCK = ckpt.shape[2]
    nblk = triton.cdiv(dim, BLOCK_D)
    f32 = torch.float32
    dev = u.device
    A2 = (A.float() * LOG2E).contiguous()
    Bt = B.float().transpose(1, 2).contiguous()
    Ct = C.float().transpose(1, 2).contiguous()
    scratch = torch.empty(batch * nblk, CK // TT, BLOCK_D, NP, dtype=f32, device=dev)
    du, ddelta, dz = torch.empty_like(u), torch.empty_like(delta), torch.empty_like(z)
    dAp = torch.empty(batch, dim, NP, dtype=f32, device=dev)
    dBp = torch.empty(nblk, batch, L, NP, dtype=f32, device=dev)
    dCp = torch.empty(nblk, batch, L, NP, dtype=f32, device=dev)
    dDp = torch.empty(batch, dim, dtype=f32, device=dev)
    dbp = torch.empty(batch, dim, dtype=f32, device=dev)
    launcher(bwd_split_kernel)[(nblk, batch)](
        dout.contiguous(),
        u,
        delta,
        A2,
        Bt,
        Ct,
        D,
        z,
        delta_bias,
        ckpt,
        scratch,
        du,
        ddelta,
        dz,
        dAp,
        dBp,
        dCp,
        dDp,
        dbp,
        dim,
        L,
        NCK,
        NP=NP,
        CK=CK,
        BLOCK_D=BLOCK_D,
        TT=TT,
        KEEP_A=KEEP_A,
        RS=RS,
        EMU=RS and not u.is_cuda,
        PF=PF,
        num_warps=warps,
    )
    if not reduce:
        return du
    dA = dAp.sum(0)
    dB = dBp.sum(0).transpose(1, 2)
    dC = dCp.sum(0).transpose(1, 2)
    return du, ddelta, dA, dB, dC, dDp.sum(0), dz, dbp.sum(0)
