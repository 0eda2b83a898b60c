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
from its checkpoint, and the state at the start of every 4-step tile is written to a small scratch
buffer (``Note [selective scan thread layout]``: same register layout, one 16-byte vector per
thread); then the tiles are visited in reverse: each recomputes its four states (kept in
registers), produces y_t, dz_t and the dC_t partial, and runs the adjoint back through them.
About three exp2 per (d, n, t): chunk pass, tile recompute, reverse step.

Reductions are deterministic: dB / dC over the channels of a program are tree sums in registers
written to per-block partial buffers, dA / dD / ddelta_bias to per-batch partials; the launcher
sums the partials with ``torch.sum``.
"""

from __future__ import annotations

import math

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

LN2 = math.log(2.0)


@triton.jit
def _state_step(h, b_A2, dt, dtu, p_B, t, L, NP: tl.constexpr):
    b_B = tl.load(p_B + t * NP, mask=t < L, other=0.0)
    return tl.exp2(dt[:, None, None] * b_A2) * h + dtu[:, None, None] * b_B


@triton.jit
def _recompute_step(h, b_A2, dt, dtu, dy, p_B, p_C, p_dC, t, L, NP: tl.constexpr):
    """Forward step inside the tile being differentiated: h_t, sum_n C_t h_t, and the dC_t
    partial of this block (sum over its channels of dy_t h_t)."""
    m = t < L
    b_B = tl.load(p_B + t * NP, mask=m, other=0.0)
    b_C = tl.load(p_C + t * NP, mask=m, other=0.0)
    h = tl.exp2(dt[:, None, None] * b_A2) * h + dtu[:, None, None] * b_B
    y = tl.sum(tl.sum(h * b_C, axis=2), axis=1)
    dC = tl.sum(h * dy[:, None, None], axis=0)  # (NG, 4)
    tl.store(p_dC + t * NP, dC, mask=m)
    return h, y


@triton.jit
def _adjoint_step(G, h_prev, b_A2, dt, dtu, dy, p_B, p_C, p_dB, dA_acc, t, L, NP: tl.constexpr):
    """Reverse step (Note [selective scan backward]). G = a_{t+1} g_{t+1} on entry, a_t g_t on exit.
    Returns (G, dA_acc, sum_n q_t A2, sum_n g_t B_t)."""
    m = t < L
    b_B = tl.load(p_B + t * NP, mask=m, other=0.0)
    b_C = tl.load(p_C + t * NP, mask=m, other=0.0)
    g = G + b_C * dy[:, None, None]
    a = tl.exp2(dt[:, None, None] * b_A2)
    ga = g * a
    q = ga * h_prev
    dA_acc += q * dt[:, None, None]
    qA = tl.sum(tl.sum(q * b_A2, axis=2), axis=1)
    gB = tl.sum(tl.sum(g * b_B, axis=2), axis=1)
    dB = tl.sum(g * dtu[:, None, None], axis=0)
    tl.store(p_dB + t * NP, dB, mask=m)
    return ga, dA_acc, qA, gB


@triton.jit
def _selective_scan_bwd_kernel(
    dout,  # (batch, dim, L) gradient of out, u's dtype
    dlast,  # (batch, dim, N) fp32 gradient of the last state, or None
    u,  # (batch, dim, L)
    delta,  # (batch, dim, L)
    A2,  # (NP // 4, dim, 4) fp32, A * log2(e)
    Bt,  # (batch, G, L, NP) fp32
    Ct,  # (batch, G, L, NP) fp32
    Dv,  # (dim,) fp32 or None
    z,  # (batch, dim, L) or None
    delta_bias,  # (dim,) fp32 or None
    ckpt,  # (batch, dim, NCK, N) fp32 state before each chunk
    scratch,  # (batch, CK // 4, NP // 4, dim, 4) fp32 tile-start states of the current chunk
    du,  # (batch, dim, L) out, u's dtype
    ddelta,  # (batch, dim, L) out, delta's dtype
    dz,  # (batch, dim, L) out, or None when z is None
    dAp,  # (batch, NP // 4, dim, 4) fp32 per-batch partial dA
    dBp,  # (dim // BLOCK_D, batch, L, NP) fp32 per-block partial dB
    dCp,  # (dim // BLOCK_D, batch, L, NP) fp32 per-block partial dC
    dDp,  # (batch, dim) fp32 per-batch partial dD, or None
    dbiasp,  # (batch, dim) fp32 per-batch partial ddelta_bias, or None
    dinit,  # (batch, dim, N) fp32 gradient of the initial state
    dim,  # channels
    L,  # sequence length
    N,  # states
    G,  # groups of B / C
    NCK,  # checkpoints
    SOFTPLUS: tl.constexpr,
    NP: tl.constexpr,
    CK: tl.constexpr,
    BLOCK_D: tl.constexpr,
    HAS_D: tl.constexpr,
    HAS_Z: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_DLAST: tl.constexpr,
):
    NG: tl.constexpr = NP // 4
    NT: tl.constexpr = CK // 4
    i_d = tl.program_id(0)
    i_b = tl.program_id(1).to(tl.int64)
    o_d = i_d * BLOCK_D + tl.arange(0, BLOCK_D)
    m_d = o_d < dim
    o_n = tl.arange(0, NG)[None, :, None] * 4 + tl.arange(0, 4)[None, None, :]  # (1, NG, 4)
    o_n2 = tl.arange(0, NG)[:, None] * 4 + tl.arange(0, 4)[None, :]  # (NG, 4)
    m_dn = m_d[:, None, None] & (o_n < N)
    o_t = tl.arange(0, 4)
    # (BLOCK_D, NG, 4) offsets in the (NG, dim, 4) layout of A2, dAp and the scratch
    o_g4 = tl.arange(0, NG)[None, :, None] * (dim * 4) + o_d[:, None, None] * 4 + tl.arange(0, 4)[None, None, :]

    b_A2 = tl.load(A2 + o_g4, mask=m_d[:, None, None], other=0.0)
    if HAS_D:
        b_D = tl.load(Dv + o_d, mask=m_d, other=0.0)
    if HAS_BIAS:
        b_bias = tl.load(delta_bias + o_d, mask=m_d, other=0.0)

    row = (i_b * dim + o_d.to(tl.int64)) * L
    grp = (i_d * BLOCK_D) // (dim // G)
    bc = (i_b * G + grp) * L * NP + o_n
    p_B = Bt + bc
    p_C = Ct + bc
    part = (i_d * tl.num_programs(1) + i_b) * L * NP + o_n2  # (NG, 4) in the partial buffers
    p_dB = dBp + part
    p_dC = dCp + part
    st = (i_b * dim + o_d.to(tl.int64))[:, None, None] * N + o_n
    p_ck = ckpt + (i_b * dim + o_d.to(tl.int64))[:, None, None] * NCK * N + o_n
    p_sc = scratch + i_b * NT * NG * dim * 4 + o_g4

    if HAS_DLAST:
        G_adj = tl.load(dlast + st, mask=m_dn, other=0.0)
    else:
        G_adj = tl.zeros((BLOCK_D, NG, 4), dtype=tl.float32)
    dA_acc = tl.zeros((BLOCK_D, NG, 4), dtype=tl.float32)
    dD_acc = tl.zeros((BLOCK_D, 4), dtype=tl.float32)
    dbias_acc = tl.zeros((BLOCK_D, 4), dtype=tl.float32)

    for cc in range(0, NCK):
        c = NCK - 1 - cc
        t_beg = c * CK
        n_tiles = (tl.minimum(t_beg + CK, L) - t_beg + 3) // 4
        # chunk pass: tile-start states into the scratch. The scratch is written and read in
        # different register layouts (Triton picks a coalesced layout for the store), i.e. by
        # different threads of the program: barriers order the writes before the reads and the
        # reads of the previous chunk before these writes.
        tl.debug_barrier()
        h = tl.load(p_ck + c * N, mask=m_dn, other=0.0)
        for k in range(0, n_tiles - 1):
            t0 = t_beg + 4 * k
            tl.store(p_sc + k * (NG * dim * 4), h, mask=m_d[:, None, None])
            o = row[:, None] + (t0 + o_t)[None, :]
            m = m_d[:, None] & ((t0 + o_t) < L)[None, :]
            b_u = tl.load(u + o, mask=m, other=0.0).to(tl.float32)
            b_dt = tl.load(delta + o, mask=m, other=0.0).to(tl.float32)
            if HAS_BIAS:
                b_dt += b_bias[:, None]
            if SOFTPLUS:
                b_dt = _softplus(b_dt)
            b_dt = tl.where(m, b_dt, 0.0)
            dt0, dt1, dt2, dt3 = _split4(b_dt)
            x0, x1, x2, x3 = _split4(b_dt * b_u)
            h = _state_step(h, b_A2, dt0, x0, p_B, t0, L, NP)
            h = _state_step(h, b_A2, dt1, x1, p_B, t0 + 1, L, NP)
            h = _state_step(h, b_A2, dt2, x2, p_B, t0 + 2, L, NP)
            h = _state_step(h, b_A2, dt3, x3, p_B, t0 + 3, L, NP)
        tl.store(p_sc + (n_tiles - 1) * (NG * dim * 4), h, mask=m_d[:, None, None])
        tl.debug_barrier()
        # tiles in reverse
        for kk in range(0, n_tiles):
            k = n_tiles - 1 - kk
            t0 = t_beg + 4 * k
            hs = tl.load(p_sc + k * (NG * dim * 4), mask=m_d[:, None, None], other=0.0)
            o = row[:, None] + (t0 + o_t)[None, :]
            m = m_d[:, None] & ((t0 + o_t) < L)[None, :]
            b_u = tl.load(u + o, mask=m, other=0.0).to(tl.float32)
            b_x = tl.load(delta + o, mask=m, other=0.0).to(tl.float32)
            b_do = tl.load(dout + o, mask=m, other=0.0).to(tl.float32)
            if HAS_BIAS:
                b_x += b_bias[:, None]
            if SOFTPLUS:
                b_dt = _softplus(b_x)
            else:
                b_dt = b_x
            b_dt = tl.where(m, b_dt, 0.0)
            b_dtu = b_dt * b_u
            if HAS_Z:
                b_z = tl.load(z + o, mask=m, other=0.0).to(tl.float32)
                sig_z = _sigmoid(b_z)
                b_dy = b_do * b_z * sig_z
            else:
                b_dy = b_do
            dt0, dt1, dt2, dt3 = _split4(b_dt)
            x0, x1, x2, x3 = _split4(b_dtu)
            dy0, dy1, dy2, dy3 = _split4(b_dy)
            h0, y0 = _recompute_step(hs, b_A2, dt0, x0, dy0, p_B, p_C, p_dC, t0, L, NP)
            h1, y1 = _recompute_step(h0, b_A2, dt1, x1, dy1, p_B, p_C, p_dC, t0 + 1, L, NP)
            h2, y2 = _recompute_step(h1, b_A2, dt2, x2, dy2, p_B, p_C, p_dC, t0 + 2, L, NP)
            _h3, y3 = _recompute_step(h2, b_A2, dt3, x3, dy3, p_B, p_C, p_dC, t0 + 3, L, NP)
            G_adj, dA_acc, qA3, gB3 = _adjoint_step(G_adj, h2, b_A2, dt3, x3, dy3, p_B, p_C, p_dB, dA_acc, t0 + 3, L, NP)
            G_adj, dA_acc, qA2, gB2 = _adjoint_step(G_adj, h1, b_A2, dt2, x2, dy2, p_B, p_C, p_dB, dA_acc, t0 + 2, L, NP)
            G_adj, dA_acc, qA1, gB1 = _adjoint_step(G_adj, h0, b_A2, dt1, x1, dy1, p_B, p_C, p_dB, dA_acc, t0 + 1, L, NP)
            G_adj, dA_acc, qA0, gB0 = _adjoint_step(G_adj, hs, b_A2, dt0, x0, dy0, p_B, p_C, p_dB, dA_acc, t0, L, NP)
            b_qA = _join4(qA0, qA1, qA2, qA3) * 0.6931471805599453  # A2 -> A
            b_gB = _join4(gB0, gB1, gB2, gB3)
            b_ddt = b_qA + b_u * b_gB
            b_du = b_dt * b_gB
            if HAS_D:
                b_du += b_D[:, None] * b_dy
                dD_acc += b_dy * b_u
            if SOFTPLUS:
                b_ddt = b_ddt * _sigmoid(b_x)
            b_ddt = tl.where(m, b_ddt, 0.0)
            dbias_acc += b_ddt
            tl.store(du + o, b_du.to(du.dtype.element_ty), mask=m)
            tl.store(ddelta + o, b_ddt.to(ddelta.dtype.element_ty), mask=m)
            if HAS_Z:
                b_y = _join4(y0, y1, y2, y3)
                if HAS_D:
                    b_y += b_D[:, None] * b_u
                b_dz = b_do * b_y * sig_z * (1.0 + b_z * (1.0 - sig_z))
                tl.store(dz + o, b_dz.to(dz.dtype.element_ty), mask=m)
    tl.store(dinit + st, G_adj, mask=m_dn)
    tl.store(dAp + i_b * NG * dim * 4 + o_g4, dA_acc, mask=m_d[:, None, None])
    if HAS_D:
        tl.store(dDp + i_b * dim + o_d, tl.sum(dD_acc, axis=1), mask=m_d)
    if HAS_BIAS:
        tl.store(dbiasp + i_b * dim + o_d, tl.sum(dbias_acc, axis=1), mask=m_d)


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
    batch, dim, L = u.shape
    N = A.shape[1]
    NP = pad_states(N)
    G = num_groups(B)
    assert CHECKPOINT_LEN % TILE_T == 0
    block_d, warps = block_channels(batch, dim, G)
    nblk = triton.cdiv(dim, block_d)
    dev = u.device
    f32 = torch.float32
    rest = iter(optional_grads)
    dD = next(rest) if D is not None else None
    dz = next(rest) if z is not None else None
    dbias = next(rest) if delta_bias is not None else None
    dinit_out = next(rest) if initial_state is not None else None

    scratch = torch.empty((batch, CHECKPOINT_LEN // 4, NP // 4, dim, 4), dtype=f32, device=dev)
    dAp = torch.empty((batch, NP // 4, dim, 4), dtype=f32, device=dev)
    dBp = torch.empty((nblk, batch, L, NP), dtype=f32, device=dev)
    dCp = torch.empty((nblk, batch, L, NP), dtype=f32, device=dev)
    dDp = torch.empty((batch, dim), dtype=f32, device=dev) if D is not None else None
    dbp = torch.empty((batch, dim), dtype=f32, device=dev) if delta_bias is not None else None
    dinit = torch.empty((batch, dim, N), dtype=f32, device=dev)
    torch.library.wrap_triton(_selective_scan_bwd_kernel)[(nblk, batch)](
        dout.contiguous(),
        dlast_state.to(f32).contiguous() if dlast_state is not None else None,
        u.contiguous(),
        delta.contiguous(),
        prep_A(A, NP),
        prep_BC(B, batch, NP),
        prep_BC(C, batch, NP),
        D.to(f32).contiguous() if D is not None else None,
        z.contiguous() if z is not None else None,
        delta_bias.to(f32).contiguous() if delta_bias is not None else None,
        checkpoints,
        scratch,
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
        HAS_DLAST=dlast_state is not None,
        num_warps=warps,
    )
    dA.copy_(dAp.sum(0).permute(1, 0, 2).reshape(dim, NP)[:, :N])
    # (nblk, batch, L, NP) -> (G, nblk / G, batch, L, NP) -> (batch, G, N, L)
    for grad, part in ((dB, dBp), (dC, dCp)):
        red = part.reshape(G, nblk // G, batch, L, NP).sum(1)[..., :N].permute(1, 0, 3, 2)
        grad.copy_(red.reshape(grad.shape))
    if dD is not None:
        dD.copy_(dDp.sum(0))
    if dbias is not None:
        dbias.copy_(dbp.sum(0))
    if dinit_out is not None:
        dinit_out.copy_(dinit)
