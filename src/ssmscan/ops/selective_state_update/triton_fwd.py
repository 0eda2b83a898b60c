"""Triton kernel of ``ssmscan::selective_state_update`` (CUDA): one decode step.

Each program owns (batch b, BLOCK_D channels) and all N states as a (BLOCK_D, NP) tile read and
written once: the step is memory-bound on the state, so the tile loads are 16-byte vectors along
N and nothing else is reread.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ssmscan.ops.common.host_math import cdiv, next_pow2
from ssmscan.ops.common.triton_launch import launcher


@triton.jit
def _selective_state_update_fwd_kernel(
    state,  # (batch, dim, N) h_{t-1}
    x,  # (batch, dim)
    dt,  # (batch, dim)
    A,  # (dim, N) fp32
    B,  # (batch, G, N)
    C,  # (batch, G, N)
    Dv,  # (dim,) fp32 or None
    z,  # (batch, dim) or None
    dt_bias,  # (dim,) fp32 or None
    out,  # (batch, dim) out, x's dtype
    new_state,  # (batch, dim, N) out, state's dtype
    dim,  # channels
    N,  # states
    G,  # groups of B / C
    SOFTPLUS: tl.constexpr,
    NP: tl.constexpr,  # N rounded up to a power of two
    BLOCK_D: tl.constexpr,
    HAS_D: tl.constexpr,
    HAS_Z: tl.constexpr,
    HAS_BIAS: tl.constexpr,
):
    i_d = tl.program_id(0)
    i_b = tl.program_id(1).to(tl.int64)
    o_d = i_d * BLOCK_D + tl.arange(0, BLOCK_D)
    o_n = tl.arange(0, NP)
    m_d = o_d < dim
    m_dn = m_d[:, None] & (o_n < N)[None, :]
    o_bd = i_b * dim + o_d
    b_x = tl.load(x + o_bd, mask=m_d, other=0.0).to(tl.float32)
    b_dt = tl.load(dt + o_bd, mask=m_d, other=0.0).to(tl.float32)
    if HAS_BIAS:
        b_dt += tl.load(dt_bias + o_d, mask=m_d, other=0.0)
    if SOFTPLUS:
        e = tl.exp(tl.minimum(b_dt, 20.0))
        w = 1.0 + e
        b_dt = tl.where(b_dt > 20.0, b_dt, tl.where(w == 1.0, e, tl.log(w) * (e / (w - 1.0))))
    grp = (o_d // (dim // G)).to(tl.int64)
    o_bc = (i_b * G + grp)[:, None] * N + o_n[None, :]
    b_B = tl.load(B + o_bc, mask=m_dn, other=0.0).to(tl.float32)
    b_C = tl.load(C + o_bc, mask=m_dn, other=0.0).to(tl.float32)
    b_A = tl.load(A + o_d[:, None] * N + o_n[None, :], mask=m_dn, other=0.0)
    o_s = o_bd[:, None] * N + o_n[None, :]
    h = tl.load(state + o_s, mask=m_dn, other=0.0).to(tl.float32)
    h = tl.exp(b_dt[:, None] * b_A) * h + (b_dt * b_x)[:, None] * b_B
    tl.store(new_state + o_s, h.to(new_state.dtype.element_ty), mask=m_dn)
    y = tl.sum(h * b_C, axis=1)
    if HAS_D:
        y += tl.load(Dv + o_d, mask=m_d, other=0.0) * b_x
    if HAS_Z:
        b_z = tl.load(z + o_bd, mask=m_d, other=0.0).to(tl.float32)
        y *= b_z / (1.0 + tl.exp(-b_z))
    tl.store(out + o_bd, y.to(out.dtype.element_ty), mask=m_d)


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
) -> None:
    """One step into the preallocated ``out`` (batch, dim) and ``new_state`` (batch, dim, N)."""
    batch, dim = x.shape
    # N, G and dim pick constexprs: int() specializes them under symbolic sizes (next_power_of_2 of
    # a SymInt is a bitwise expression sympy cannot cope with)
    N = int(A.shape[1])
    if batch == 0 or dim == 0:
        return
    G = 1 if B.dim() == 2 else int(B.shape[1])
    NP = next_pow2(N)
    block_d = max(1, min(128, 2048 // NP, next_pow2(int(dim))))
    grid = (cdiv(dim, block_d), batch)
    f32 = torch.float32
    launcher(_selective_state_update_fwd_kernel)[grid](
        state.contiguous(),
        x.contiguous(),
        dt.contiguous(),
        A.to(f32).contiguous(),
        B.contiguous(),
        C.contiguous(),
        D.to(f32).contiguous() if D is not None else None,
        z.contiguous() if z is not None else None,
        dt_bias.to(f32).contiguous() if dt_bias is not None else None,
        out,
        new_state,
        dim,
        N,
        G,
        SOFTPLUS=dt_softplus,
        NP=NP,
        BLOCK_D=block_d,
        HAS_D=D is not None,
        HAS_Z=z is not None,
        HAS_BIAS=dt_bias is not None,
        num_warps=4,
    )
