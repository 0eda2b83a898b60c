"""Triton kernel of ``ssmscan::conv1d_step`` (CUDA): one decode step of a causal depthwise
convolution in one launch.

Each program owns (batch entry b, BLOCK_D channels) and the whole (BLOCK_D, K) window: it reads
the state's last K - 1 inputs and the new token, writes them as the next state, and reduces the
window against the weight (float32) into the output, bias and SiLU included. Every input is read
through its strides (x is usually a slice of the input projection's output).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ssmscan.ops.common.host_math import cdiv, next_pow2
from ssmscan.ops.common.triton_launch import launcher


@triton.jit
def _conv1d_step_fwd_kernel(
    x,  # (batch, dim) the new token, strided
    state,  # (batch, dim, K) the last K inputs, strided
    w,  # (dim, K), strided
    bias,  # (dim,), strided, or a placeholder
    out,  # (batch, dim) out, contiguous, x's dtype
    new_state,  # (batch, dim, K) out, contiguous, state's dtype
    dim,  # channels
    K,  # taps (the state's length)
    s_x_b,  # x strides: batch, channel
    s_x_d,
    s_s_b,  # state strides: batch, channel, tap
    s_s_d,
    s_s_k,
    s_w_d,  # weight strides: channel, tap
    s_w_k,
    s_bias_d,  # bias stride
    BLOCK_D: tl.constexpr,
    KP: tl.constexpr,  # K rounded up to a power of two
    HAS_BIAS: tl.constexpr,
    SILU: tl.constexpr,
    IN_PLACE: tl.constexpr,  # new_state is state: every thread's loads land before any store
):
    i_b = tl.program_id(0).to(tl.int64)
    i_d = tl.program_id(1).to(tl.int64)
    o_d = i_d * BLOCK_D + tl.arange(0, BLOCK_D).to(tl.int64)
    o_k = tl.arange(0, KP).to(tl.int64)
    m_d = o_d < dim
    m_dk = m_d[:, None] & (o_k < K)[None, :]
    # tap k of the next state is tap k + 1 of this one; the last tap is the new token
    p_s = state + i_b * s_s_b + o_d[:, None] * s_s_d + (o_k[None, :] + 1) * s_s_k
    b_s = tl.load(p_s, mask=m_d[:, None] & (o_k < K - 1)[None, :], other=0.0)
    b_x = tl.load(x + i_b * s_x_b + o_d * s_x_d, mask=m_d, other=0.0)
    b_x = b_x.to(new_state.dtype.element_ty)
    b_s = tl.where((o_k == K - 1)[None, :], b_x[:, None], b_s.to(new_state.dtype.element_ty))
    p_ns = new_state + i_b * dim * K + o_d[:, None] * K + o_k[None, :]
    if IN_PLACE:
        # tap k is read by the thread that writes tap k - 1; the barrier orders every read of
        # this program's taps before any write (no other program touches its channels)
        tl.debug_barrier()
    tl.store(p_ns, b_s, mask=m_dk)
    b_w = tl.load(w + o_d[:, None] * s_w_d + o_k[None, :] * s_w_k, mask=m_dk, other=0.0)
    b_y = tl.sum(b_s.to(tl.float32) * b_w.to(tl.float32), axis=1)
    if HAS_BIAS:
        b_y += tl.load(bias + o_d * s_bias_d, mask=m_d, other=0.0).to(tl.float32)
    if SILU:
        b_y = b_y / (1.0 + tl.exp(-b_y))
    tl.store(out + i_b * dim + o_d, b_y.to(out.dtype.element_ty), mask=m_d)


def launch(
    x: torch.Tensor,
    conv_state: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    silu: bool,
    out: torch.Tensor,
    new_state: torch.Tensor,
) -> None:
    """One step into the preallocated contiguous ``out`` (batch, dim) and ``new_state`` (batch,
    dim, K); args as ``ssmscan::conv1d_step``. ``new_state`` is either disjoint from
    ``conv_state`` or, for a contiguous ``conv_state``, that tensor itself (the step in place: a
    program loads all taps of its channels before it stores them; programs share no channel).
    Partly overlapping buffers are not supported."""
    batch, dim, K = (int(s) for s in conv_state.shape)
    if batch == 0 or dim == 0 or K == 0:
        return
    in_place = new_state.data_ptr() == conv_state.data_ptr()
    if in_place and not conv_state.is_contiguous():
        raise ValueError(
            f"conv1d_step in place needs a contiguous conv_state; got strides "
            f"{tuple(conv_state.stride())} for shape {tuple(conv_state.shape)}"
        )
    block_d = min(128, next_pow2(dim))
    launcher(_conv1d_step_fwd_kernel)[(batch, cdiv(dim, block_d))](
        x,
        conv_state,
        weight,
        bias,
        out,
        new_state,
        dim,
        K,
        *x.stride(),
        *conv_state.stride(),
        *weight.stride(),
        bias.stride(0) if bias is not None else 0,
        BLOCK_D=block_d,
        KP=next_pow2(K),
        HAS_BIAS=bias is not None,
        SILU=silu,
        IN_PLACE=in_place,
        num_warps=4 if block_d >= 128 else 1,
    )
