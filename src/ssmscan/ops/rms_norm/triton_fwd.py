"""Triton kernel of ``ssmscan::rms_norm`` and ``ssmscan::gated_rms_norm`` (CUDA): one program
per (row, group).

A group of up to 8192 channels stays in registers (one read of x and z, one write); a larger
one is walked twice in blocks of 4096 (sum of squares, then normalise and store), so rows of
any size work. x and z are read through their row strides (z is usually a slice of the input
projection's output); channels must be contiguous. Arithmetic in float32; ``ROUND_X`` first
rounds x to the weight's dtype (the pre-norm of a Mamba block: ``RMSNorm(x.to(weight.dtype))``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ssmscan.ops.common.host_math import cdiv, next_pow2
from ssmscan.ops.common.triton_launch import launcher

MAX_ONE_PASS = 8192
BLOCK_TWO_PASS = 4096


@triton.jit
def _gated_input(
    p_x, p_r, p_nr, p_z, p_w, o, m, HAS_RES, STORE_RES, HAS_Z, NORM_BEFORE_GATE, ROUND_X
):
    """x (plus the residual, stored as the new residual when STORE_RES; gated by silu(z) unless
    NORM_BEFORE_GATE) in float32 at offsets o."""
    b_x = tl.load(p_x + o, mask=m, other=0.0)
    if HAS_RES:
        b_r = tl.load(p_r + o, mask=m, other=0.0).to(tl.float32)
        b_x = (b_x.to(tl.float32) + b_r).to(p_nr.dtype.element_ty)
        if STORE_RES:
            tl.store(p_nr + o, b_x, mask=m)
    if ROUND_X:
        b_x = b_x.to(p_w.dtype.element_ty)
    b_x = b_x.to(tl.float32)
    if HAS_Z:
        if not NORM_BEFORE_GATE:
            b_z = tl.load(p_z + o, mask=m, other=0.0).to(tl.float32)
            b_x = b_x * (b_z / (1.0 + tl.exp(-b_z)))
    return b_x


@triton.jit
def _normed_output(b_h, rstd, p_w, p_z, p_o, o, m, HAS_Z, NORM_BEFORE_GATE):
    """Store (h * rstd * w, gated by silu(z) when NORM_BEFORE_GATE) at offsets o."""
    b_w = tl.load(p_w + o, mask=m, other=0.0).to(tl.float32)
    b_y = b_h * rstd * b_w
    if HAS_Z:
        if NORM_BEFORE_GATE:
            b_z = tl.load(p_z + o, mask=m, other=0.0).to(tl.float32)
            b_y = b_y * (b_z / (1.0 + tl.exp(-b_z)))
    tl.store(p_o + o, b_y.to(p_o.dtype.element_ty), mask=m)


@triton.jit
def _gated_rms_norm_fwd_kernel(
    x,  # (rows, dim) row-strided, contiguous channels
    z,  # (rows, dim) row-strided, contiguous channels, or a placeholder
    r,  # (rows, dim) residual, row-strided, contiguous channels, or a placeholder
    w,  # (dim,) contiguous
    out,  # (rows, dim) out, contiguous
    new_r,  # (rows, dim) out: x + r, contiguous, or a placeholder
    dim,  # channels per row
    group_size,  # channels per group (divides dim)
    s_x_r,  # x row stride
    s_z_r,  # z row stride
    s_r_r,  # r row stride
    eps,  # added to each group's mean square
    BLOCK: tl.constexpr,  # channels per pass (power of two)
    ONE_PASS: tl.constexpr,  # group_size <= BLOCK: the group stays in registers
    HAS_Z: tl.constexpr,
    NORM_BEFORE_GATE: tl.constexpr,
    ROUND_X: tl.constexpr,  # round x to w's dtype before the float32 arithmetic
    HAS_RES: tl.constexpr,  # normalise x + r, stored into new_r
):
    i_r = tl.program_id(0).to(tl.int64)
    i_g = tl.program_id(1).to(tl.int64)
    eps32 = tl.full((), eps, tl.float32)  # float32 math even where Inductor passes a float64
    o_0 = i_g * group_size
    p_x = x + i_r * s_x_r + o_0
    p_z = z + i_r * s_z_r + o_0
    p_r = r + i_r * s_r_r + o_0
    p_w = w + o_0
    p_o = out + i_r * dim + o_0
    p_nr = new_r + i_r * dim + o_0
    o_c = tl.arange(0, BLOCK)
    if ONE_PASS:
        m_c = o_c < group_size
        b_h = _gated_input(
            p_x, p_r, p_nr, p_z, p_w, o_c, m_c, HAS_RES, True, HAS_Z, NORM_BEFORE_GATE, ROUND_X
        )
        rstd = 1.0 / tl.sqrt(tl.sum(b_h * b_h, axis=0) / group_size + eps32)
        _normed_output(b_h, rstd, p_w, p_z, p_o, o_c, m_c, HAS_Z, NORM_BEFORE_GATE)
    else:
        b_acc = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(0, group_size, BLOCK):
            m_c = start + o_c < group_size
            b_h = _gated_input(
                p_x,
                p_r,
                p_nr,
                p_z,
                p_w,
                start + o_c,
                m_c,
                HAS_RES,
                True,
                HAS_Z,
                NORM_BEFORE_GATE,
                ROUND_X,
            )
            b_acc += b_h * b_h
        rstd = 1.0 / tl.sqrt(tl.sum(b_acc, axis=0) / group_size + eps32)
        for start in range(0, group_size, BLOCK):
            m_c = start + o_c < group_size
            b_h = _gated_input(
                p_x,
                p_r,
                p_nr,
                p_z,
                p_w,
                start + o_c,
                m_c,
                HAS_RES,
                False,
                HAS_Z,
                NORM_BEFORE_GATE,
                ROUND_X,
            )
            _normed_output(b_h, rstd, p_w, p_z, p_o, start + o_c, m_c, HAS_Z, NORM_BEFORE_GATE)


def _rows(t: torch.Tensor) -> torch.Tensor:
    """(..., dim) as (rows, dim) with contiguous channels: a view where the strides allow."""
    t2 = t.reshape(-1, t.shape[-1])
    return t2 if t2.stride(-1) == 1 or t2.shape[-1] == 1 else t2.contiguous()


def launch(
    x: torch.Tensor,
    z: torch.Tensor | None,
    weight: torch.Tensor,
    eps: float,
    group_size: int,
    norm_before_gate: bool,
    round_x: bool,
    out: torch.Tensor,
    residual: torch.Tensor | None = None,
    new_residual: torch.Tensor | None = None,
) -> None:
    """Normalise x (..., dim) into the preallocated contiguous ``out`` (shaped like x, its dtype
    the result's). Args as ``ssmscan::gated_rms_norm``; ``round_x`` rounds x to weight's dtype
    first (``ssmscan::rms_norm``); with ``residual`` (shaped like x) x + residual is
    normalised and stored into the preallocated contiguous ``new_residual`` (its dtype the
    sum's; ``ssmscan::add_rms_norm``)."""
    dim, group_size = int(x.shape[-1]), int(group_size)
    x2 = _rows(x)
    z2 = _rows(z) if z is not None else None
    r2 = _rows(residual) if residual is not None else None
    rows = x2.shape[0]
    if rows == 0 or dim == 0:
        return
    one_pass = next_pow2(group_size) <= MAX_ONE_PASS
    block = next_pow2(group_size) if one_pass else BLOCK_TWO_PASS
    launcher(_gated_rms_norm_fwd_kernel)[(rows, cdiv(dim, group_size))](
        x2,
        z2,
        r2,
        weight.contiguous(),
        out,
        new_residual,
        dim,
        group_size,
        x2.stride(0),
        z2.stride(0) if z2 is not None else 0,
        r2.stride(0) if r2 is not None else 0,
        float(eps),
        BLOCK=block,
        ONE_PASS=one_pass,
        HAS_Z=z is not None,
        NORM_BEFORE_GATE=norm_before_gate,
        ROUND_X=round_x,
        HAS_RES=residual is not None,
        num_warps=min(max(block // 256, 1), 8),
    )
