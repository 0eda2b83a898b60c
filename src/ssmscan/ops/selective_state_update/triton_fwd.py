"""Triton kernel of ``ssmscan::selective_state_update`` (CUDA): one decode step.

Both layouts run as Mamba-2's (rows, nheads, headdim, N): a Mamba-1 state (rows, dim, N) is one
head of headdim = dim. Each program owns (batch entry b, head h, BLOCK_P channels of the head) and
all N states as a (BLOCK_P, NP) tile, read and written once: the step is memory-bound on the
state, so nothing else is reread. Every input is read through its strides, so the zero-stride
views Mamba-2 callers pass (A, dt, D, dt_bias expanded over headdim) cost no copy.

Note [state rows]: with ``state_batch_indices`` entry b reads and writes state row
``state_batch_indices[b]``; a negative index marks a padding entry (mamba-ssm's convention): its
output is zero and no row is written. ``new_state`` then arrives holding a copy of ``state``, so
rows no entry picks come through unchanged. An index past the last row (never valid: the eager
checks refuse it) writes nothing and gives NaN outputs rather than touching memory out of bounds.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ssmscan.ops.common.host_math import cdiv, next_pow2
from ssmscan.ops.common.triton_launch import launcher
from ssmscan.ops.selective_state_update.plan import StateUpdatePlan, plan_state_update


@triton.jit
def _selective_state_update_fwd_kernel(
    state,  # (rows, nheads, P, N) h_{t-1}, strided
    x,  # (batch, nheads, P), strided
    dt,  # (batch, nheads, P), strided (often expanded over P)
    A,  # (nheads, P, N), strided (often expanded over P and N)
    B,  # (batch, G, N), strided
    C,  # (batch, G, N), strided
    Dv,  # (nheads, P), strided, or a placeholder
    z,  # (batch, nheads, P), strided, or a placeholder
    dt_bias,  # (nheads, P), strided, or a placeholder
    sbi,  # (batch,) int32/int64 state row of each entry, or a placeholder
    out,  # (batch, nheads, P) out, contiguous, x's dtype
    new_state,  # (rows, nheads, P, N) out, strided, state's dtype (may be ``state`` itself)
    rows,  # state rows
    P,  # channels per head (headdim; dim for Mamba-1)
    N,  # states
    CH_PER_G,  # channels per group of B / C: nheads * P // G
    s_st_r,  # state strides: row, head, channel, state
    s_st_h,
    s_st_p,
    s_st_n,
    s_x_b,  # x strides: batch, head, channel
    s_x_h,
    s_x_p,
    s_dt_b,  # dt strides
    s_dt_h,
    s_dt_p,
    s_a_h,  # A strides: head, channel, state
    s_a_p,
    s_a_n,
    s_b_b,  # B strides: batch, group, state
    s_b_g,
    s_b_n,
    s_c_b,  # C strides
    s_c_g,
    s_c_n,
    s_d_h,  # D strides: head, channel
    s_d_p,
    s_z_b,  # z strides: batch, head, channel
    s_z_h,
    s_z_p,
    s_bias_h,  # dt_bias strides: head, channel
    s_bias_p,
    s_ns_r,  # new_state strides: row, head, channel, state
    s_ns_h,
    s_ns_p,
    s_ns_n,
    SOFTPLUS: tl.constexpr,
    NP: tl.constexpr,  # N rounded up to a power of two
    BLOCK_P: tl.constexpr,
    HAS_D: tl.constexpr,
    HAS_Z: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_SBI: tl.constexpr,
):
    i_p = tl.program_id(0)
    i_b = tl.program_id(1).to(tl.int64)
    i_h = tl.program_id(2).to(tl.int64)
    nheads = tl.num_programs(2)
    o_p = (i_p * BLOCK_P + tl.arange(0, BLOCK_P)).to(tl.int64)
    o_n = tl.arange(0, NP).to(tl.int64)
    m_p = o_p < P
    m_pn = m_p[:, None] & (o_n < N)[None, :]
    # Note [state rows]
    if HAS_SBI:
        row = tl.load(sbi + i_b).to(tl.int64)
    else:
        row = i_b
    live = (row >= 0) & (row < rows)
    m_s = m_pn & live

    b_x = tl.load(x + i_b * s_x_b + i_h * s_x_h + o_p * s_x_p, mask=m_p, other=0.0).to(tl.float32)
    b_dt = tl.load(dt + i_b * s_dt_b + i_h * s_dt_h + o_p * s_dt_p, mask=m_p, other=0.0)
    b_dt = b_dt.to(tl.float32)
    if HAS_BIAS:
        p_bias = dt_bias + i_h * s_bias_h + o_p * s_bias_p
        b_dt += tl.load(p_bias, mask=m_p, other=0.0).to(tl.float32)
    if SOFTPLUS:
        e = tl.exp(tl.minimum(b_dt, 20.0))
        w = 1.0 + e
        b_dt = tl.where(b_dt > 20.0, b_dt, tl.where(w == 1.0, e, tl.log(w) * (e / (w - 1.0))))
    grp = (i_h * P + o_p) // CH_PER_G
    p_B = B + i_b * s_b_b + grp[:, None] * s_b_g + o_n[None, :] * s_b_n
    p_C = C + i_b * s_c_b + grp[:, None] * s_c_g + o_n[None, :] * s_c_n
    b_B = tl.load(p_B, mask=m_pn, other=0.0).to(tl.float32)
    b_C = tl.load(p_C, mask=m_pn, other=0.0).to(tl.float32)
    p_A = A + i_h * s_a_h + o_p[:, None] * s_a_p + o_n[None, :] * s_a_n
    b_A = tl.load(p_A, mask=m_pn, other=0.0).to(tl.float32)
    p_s = state + row * s_st_r + i_h * s_st_h + o_p[:, None] * s_st_p + o_n[None, :] * s_st_n
    h = tl.load(p_s, mask=m_s, other=0.0).to(tl.float32)
    h = tl.exp(b_dt[:, None] * b_A) * h + (b_dt * b_x)[:, None] * b_B
    p_ns = new_state + row * s_ns_r + i_h * s_ns_h + o_p[:, None] * s_ns_p + o_n[None, :] * s_ns_n
    tl.store(p_ns, h.to(new_state.dtype.element_ty), mask=m_s)
    y = tl.sum(h * b_C, axis=1)
    if HAS_D:
        b_D = tl.load(Dv + i_h * s_d_h + o_p * s_d_p, mask=m_p, other=0.0).to(tl.float32)
        y += b_D * b_x
    if HAS_Z:
        b_z = tl.load(z + i_b * s_z_b + i_h * s_z_h + o_p * s_z_p, mask=m_p, other=0.0)
        b_z = b_z.to(tl.float32)
        y *= b_z / (1.0 + tl.exp(-b_z))
    y = tl.where(row >= 0, y, 0.0)
    y = tl.where(row < rows, y, float("nan"))
    o_out = (i_b * nheads + i_h) * P + o_p
    tl.store(out + o_out, y.to(out.dtype.element_ty), mask=m_p)


def _strides(t: torch.Tensor | None, ndim: int) -> tuple[int, ...]:
    return tuple(t.stride()) if t is not None else (0,) * ndim


def launch(
    state: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    dt_bias: torch.Tensor | None,
    dt_softplus: bool,
    out: torch.Tensor,
    new_state: torch.Tensor,
    state_batch_indices: torch.Tensor | None = None,
    plan: StateUpdatePlan | None = None,
) -> None:
    """One step into the preallocated contiguous ``out`` (shaped like x) and ``new_state`` (shaped
    like state; holding a copy of ``state`` when ``state_batch_indices`` is given: Note [state
    rows]). ``new_state`` may be ``state`` itself (the update in place: each program reads its
    tile before writing it, and no two programs share one). Either layout of
    ``selective_state_update``; by ``plan`` (``plan.plan_state_update``'s if None)."""
    if state.dim() == 3:  # Mamba-1: one head of headdim = dim
        state, new_state = state.unsqueeze(1), new_state.unsqueeze(1)
        x, dt, out, A = x.unsqueeze(1), dt.unsqueeze(1), out.unsqueeze(1), A.unsqueeze(0)
        z = z.unsqueeze(1) if z is not None else None
        D = D.unsqueeze(0) if D is not None else None
        dt_bias = dt_bias.unsqueeze(0) if dt_bias is not None else None
    if B.dim() == 2:
        B, C = B.unsqueeze(1), C.unsqueeze(1)
    batch, nheads, P = x.shape
    # N, G and P pick constexprs: int() specializes them under symbolic sizes (next_power_of_2 of
    # a SymInt is a bitwise expression sympy cannot cope with)
    N, G, P = int(state.shape[-1]), int(B.shape[1]), int(P)
    if batch == 0 or nheads == 0 or P == 0:
        return
    NP = next_pow2(N)
    plan = plan if plan is not None else plan_state_update(P, N)
    block_p = plan.block_p
    grid = (cdiv(P, block_p), batch, nheads)
    launcher(_selective_state_update_fwd_kernel)[grid](
        state,
        x,
        dt,
        A,
        B,
        C,
        D,
        z,
        dt_bias,
        state_batch_indices,
        out,
        new_state,
        state.shape[0],
        P,
        N,
        nheads * P // G,
        *state.stride(),
        *x.stride(),
        *dt.stride(),
        *A.stride(),
        *B.stride(),
        *C.stride(),
        *_strides(D, 2),
        *_strides(z, 3),
        *_strides(dt_bias, 2),
        *new_state.stride(),
        SOFTPLUS=dt_softplus,
        NP=NP,
        BLOCK_P=block_p,
        HAS_D=D is not None,
        HAS_Z=z is not None,
        HAS_BIAS=dt_bias is not None,
        HAS_SBI=state_batch_indices is not None,
        num_warps=plan.warps,
    )
