"""Prototype: forward with the states of a channel split over threads ((dim, NP) state layout);
constexpr switches add the library's features one at a time."""

import triton
import triton.language as tl

from ssmscan.ops.selective_scan.triton_common import _sigmoid, _softplus


@triton.jit
def _col(x, o_t, j: tl.constexpr):
    return tl.sum(tl.where(o_t[None, :] == j, x, -0.0), axis=1)


@triton.jit
def fwd_split_kernel(
    u,
    delta,
    A2,
    Bt,
    Ct,
    Dv,
    z,
    delta_bias,
    out,
    ckpt,
    dim,
    L,
    NCK,
    SEG,
    G,
    NP: tl.constexpr,
    CK: tl.constexpr,
    BLOCK_D: tl.constexpr,
    TT: tl.constexpr,
    # the library's features, added one at a time by probe4.py (all off: the plain prototype)
    F_TEND: tl.constexpr = False,  # segment bounds min(c1 * CK, L) instead of 0 / L
    F_INIT: tl.constexpr = False,  # start state from a runtime branch (segment > 0 loads it)
    F_GRP: tl.constexpr = False,  # B / C group offset computed per program
):
    i_d = tl.program_id(0)
    i_b = tl.program_id(1).to(tl.int64)
    o_d = i_d * BLOCK_D + tl.arange(0, BLOCK_D)
    m_d = o_d < dim
    o_n = tl.arange(0, NP)
    o_dn = o_d[:, None] * NP + o_n[None, :]  # (dim, NP): states contiguous
    b_A2 = tl.load(A2 + o_dn, mask=m_d[:, None], other=0.0)
    b_D = tl.load(Dv + o_d, mask=m_d, other=0.0)
    b_bias = tl.load(delta_bias + o_d, mask=m_d, other=0.0)
    row = (i_b * dim + o_d.to(tl.int64)) * L
    if F_GRP:
        grp = (i_d * BLOCK_D) // (dim // G)
        bc = (i_b * G + grp) * L * NP
    else:
        bc = i_b * L * NP
    p_B = Bt + bc + o_n
    p_C = Ct + bc + o_n
    p_ck = ckpt + (i_b * dim + o_d.to(tl.int64))[:, None] * (NCK * NP) + o_n[None, :]
    i_s = tl.program_id(2)
    NC = NCK - 1
    c0 = i_s * SEG
    c1 = tl.minimum(c0 + SEG, NC)
    if F_TEND:
        t_beg = c0 * CK
        t_end = tl.minimum(c1 * CK, L)
    else:
        t_beg = 0
        t_end = L
    if F_INIT:
        if i_s == 0:
            h = tl.zeros((BLOCK_D, NP), dtype=tl.float32)
        else:
            h = tl.load(p_ck + c0 * NP, mask=m_d[:, None], other=0.0)
    else:
        h = tl.zeros((BLOCK_D, NP), dtype=tl.float32)
    o_t = tl.arange(0, TT)
    for t0 in range(t_beg, t_end, TT):
        t0 = tl.multiple_of(t0, TT)
        if t0 % CK == 0:
            tl.store(p_ck + (t0 // CK) * NP, h, mask=m_d[:, None])
        o_tt = t0 + o_t
        m_t = o_tt < t_end
        m = m_d[:, None] & m_t[None, :]
        p = row[:, None] + o_tt[None, :]
        b_u = tl.load(u + p, mask=m, other=0.0).to(tl.float32)
        b_dt = tl.load(delta + p, mask=m, other=0.0).to(tl.float32)
        b_dt = _softplus(b_dt + b_bias[:, None])
        b_dt = tl.where(m, b_dt, 0.0)
        b_du = b_dt * b_u
        b_y = tl.zeros_like(b_u)
        for j in tl.static_range(TT):
            m_j = t0 + j < t_end
            b_B = tl.load(p_B + (t0 + j) * NP, mask=m_j, other=0.0)
            b_C = tl.load(p_C + (t0 + j) * NP, mask=m_j, other=0.0)
            b_dtj = _col(b_dt, o_t, j)
            h = tl.exp2(b_dtj[:, None] * b_A2) * h + _col(b_du, o_t, j)[:, None] * b_B[None, :]
            b_yj = tl.sum(h * b_C[None, :], axis=1)
            b_y = tl.where(o_t[None, :] == j, b_yj[:, None], b_y)
        b_y += b_D[:, None] * b_u
        b_z = tl.load(z + p, mask=m, other=0.0).to(tl.float32)
        b_y *= b_z * _sigmoid(b_z)
        tl.store(out + p, b_y.to(out.dtype.element_ty), mask=m)
    tl.store(p_ck + (NCK - 1) * NP, h, mask=m_d[:, None])
