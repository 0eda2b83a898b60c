"""Triton forward kernel of ``ssmscan::selective_scan_fwd`` (CUDA).

Layout and data preparation: Note [selective scan thread layout] in ``triton_common``.
Each program owns (batch b, BLOCK_D channels, all states) and walks L sequentially in registers:
one exp2 per (d, n, t), no cross-thread traffic. The state before every CHECKPOINT_LEN-step chunk
is written to ``checkpoints`` so that the backward can recompute states chunk by chunk.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ssmscan.ops.selective_scan.shapes import CHECKPOINT_LEN
from ssmscan.ops.selective_scan.triton_common import (
    TILE_T,
    _join4,
    _sigmoid,
    _softplus,
    _split4,
    block_channels,
    num_groups,
    pad_states,
    prep_A,
    prep_BC,
)


@triton.jit
def _fwd_step(h, b_A2, dt, dtu, p_B, p_C, t, L, NP: tl.constexpr):
    """One time step for all (d, n) of the program: returns (h_t, y_t without D and z)."""
    m = t < L
    b_B = tl.load(p_B + t * NP, mask=m, other=0.0)
    b_C = tl.load(p_C + t * NP, mask=m, other=0.0)
    dt3 = dt[:, None, None]
    h = tl.exp2(dt3 * b_A2) * h + dtu[:, None, None] * b_B
    y = tl.sum(tl.sum(h * b_C, axis=2), axis=1)
    return h, y


@triton.jit
def _selective_scan_fwd_kernel(
    u,  # (batch, dim, L) input
    delta,  # (batch, dim, L) time step before bias / softplus
    A2,  # (NP // 4, dim, 4) fp32, A * log2(e), zero-padded states
    Bt,  # (batch, G, L, NP) fp32, B time-major
    Ct,  # (batch, G, L, NP) fp32, C time-major
    Dv,  # (dim,) fp32 skip weight, or None
    z,  # (batch, dim, L) gate, or None
    delta_bias,  # (dim,) fp32, or None
    init,  # (batch, dim, N) fp32 initial state, or None
    out,  # (batch, dim, L) output, u's dtype
    last,  # (batch, dim, N) fp32 final state
    ckpt,  # (batch, dim, NCK, N) fp32 state before each chunk
    dim,  # channels
    L,  # sequence length
    N,  # states
    G,  # groups of B / C
    NCK,  # number of checkpoints = cdiv(L, CK)
    SOFTPLUS: tl.constexpr,  # dt = softplus(delta + bias)
    NP: tl.constexpr,  # padded states, multiple of 4
    CK: tl.constexpr,  # checkpoint chunk length, multiple of 4
    BLOCK_D: tl.constexpr,  # channels per program
    HAS_D: tl.constexpr,
    HAS_Z: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_INIT: tl.constexpr,
):
    NG: tl.constexpr = NP // 4
    i_d = tl.program_id(0)
    i_b = tl.program_id(1).to(tl.int64)
    o_d = i_d * BLOCK_D + tl.arange(0, BLOCK_D)
    m_d = o_d < dim
    o_n = tl.arange(0, NG)[None, :, None] * 4 + tl.arange(0, 4)[None, None, :]  # (1, NG, 4)
    m_dn = m_d[:, None, None] & (o_n < N)
    o_t = tl.arange(0, 4)

    b_A2 = tl.load(A2 + tl.arange(0, NG)[None, :, None] * (dim * 4) + o_d[:, None, None] * 4
                   + tl.arange(0, 4)[None, None, :], mask=m_d[:, None, None], other=0.0)
    if HAS_D:
        b_D = tl.load(Dv + o_d, mask=m_d, other=0.0)
    if HAS_BIAS:
        b_bias = tl.load(delta_bias + o_d, mask=m_d, other=0.0)

    row = (i_b * dim + o_d.to(tl.int64)) * L  # (BLOCK_D,) int64 offsets of the rows
    grp = (i_d * BLOCK_D) // (dim // G)  # a block never straddles two groups
    bc = (i_b * G + grp) * L * NP + o_n  # (1, NG, 4): B_t / C_t are broadcast loads
    p_B = Bt + bc
    p_C = Ct + bc
    st = (i_b * dim + o_d.to(tl.int64))[:, None, None] * N + o_n  # (BLOCK_D, NG, 4) state offsets
    if HAS_INIT:
        h = tl.load(init + st, mask=m_dn, other=0.0)
    else:
        h = tl.zeros((BLOCK_D, NG, 4), dtype=tl.float32)

    p_ck = ckpt + (i_b * dim + o_d.to(tl.int64))[:, None, None] * NCK * N + o_n
    # one flat loop over 4-step tiles; the next tile's u / delta / z are loaded before the current
    # tile is computed, so their latency hides behind a tile of exp2 work
    o = row[:, None] + o_t[None, :]
    m = m_d[:, None] & (o_t < L)[None, :]
    n_u = tl.load(u + o, mask=m, other=0.0)
    n_dt = tl.load(delta + o, mask=m, other=0.0)
    if HAS_Z:
        n_z = tl.load(z + o, mask=m, other=0.0)
    for t0 in range(0, L, 4):
        if t0 % CK == 0:
            tl.store(p_ck + (t0 // CK) * N, h, mask=m_dn)
        m = m_d[:, None] & ((t0 + o_t) < L)[None, :]
        o = row[:, None] + (t0 + o_t)[None, :]
        b_u = n_u.to(tl.float32)
        b_dt = n_dt.to(tl.float32)
        if HAS_Z:
            b_z = n_z.to(tl.float32)
        m_next = m_d[:, None] & ((t0 + 4 + o_t) < L)[None, :]
        n_u = tl.load(u + o + 4, mask=m_next, other=0.0)
        n_dt = tl.load(delta + o + 4, mask=m_next, other=0.0)
        if HAS_Z:
            n_z = tl.load(z + o + 4, mask=m_next, other=0.0)
        if HAS_BIAS:
            b_dt += b_bias[:, None]
        if SOFTPLUS:
            b_dt = _softplus(b_dt)
        b_dt = tl.where(m, b_dt, 0.0)  # padded steps: decay 1, input 0
        b_dtu = b_dt * b_u
        dt0, dt1, dt2, dt3 = _split4(b_dt)
        x0, x1, x2, x3 = _split4(b_dtu)
        h, y0 = _fwd_step(h, b_A2, dt0, x0, p_B, p_C, t0, L, NP)
        h, y1 = _fwd_step(h, b_A2, dt1, x1, p_B, p_C, t0 + 1, L, NP)
        h, y2 = _fwd_step(h, b_A2, dt2, x2, p_B, p_C, t0 + 2, L, NP)
        h, y3 = _fwd_step(h, b_A2, dt3, x3, p_B, p_C, t0 + 3, L, NP)
        b_y = _join4(y0, y1, y2, y3)
        if HAS_D:
            b_y += b_D[:, None] * b_u
        if HAS_Z:
            b_y *= b_z * _sigmoid(b_z)
        tl.store(out + o, b_y.to(out.dtype.element_ty), mask=m)
    tl.store(last + st, h, mask=m_dn)


def launch(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    delta_bias: torch.Tensor | None,
    initial_state: torch.Tensor | None,
    delta_softplus: bool,
    out: torch.Tensor,
    last_state: torch.Tensor,
    checkpoints: torch.Tensor,
) -> None:
    """Run the forward into the preallocated ``out``, ``last_state``, ``checkpoints``
    (``shapes.empty_forward_outputs``). Inputs may have any strides."""
    batch, dim, L = u.shape
    N = A.shape[1]
    NP = pad_states(N)
    G = num_groups(B)
    assert CHECKPOINT_LEN % TILE_T == 0
    block_d, warps = block_channels(batch, dim, G)
    grid = (triton.cdiv(dim, block_d), batch)
    torch.library.wrap_triton(_selective_scan_fwd_kernel)[grid](
        u.contiguous(),
        delta.contiguous(),
        prep_A(A, NP),
        prep_BC(B, batch, NP),
        prep_BC(C, batch, NP),
        D.to(torch.float32).contiguous() if D is not None else None,
        z.contiguous() if z is not None else None,
        delta_bias.to(torch.float32).contiguous() if delta_bias is not None else None,
        initial_state.to(torch.float32).contiguous() if initial_state is not None else None,
        out,
        last_state,
        checkpoints,
        dim,
        L,
        N,
        G,
        checkpoints.shape[2],
        SOFTPLUS=delta_softplus,
        NP=NP,
        CK=CHECKPOINT_LEN,
        BLOCK_D=block_d,
        HAS_D=D is not None,
        HAS_Z=z is not None,
        HAS_BIAS=delta_bias is not None,
        HAS_INIT=initial_state is not None,
        num_warps=warps,
    )
