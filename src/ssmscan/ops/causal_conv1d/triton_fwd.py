"""Triton kernel of ``ssmscan::causal_conv1d`` (CUDA): a causal depthwise convolution over a chunk
of tokens in one launch, the conv state read in place of the left padding.

Each program owns (batch entry b, BLOCK_L tokens, BLOCK_D channels). For each of the K taps it
loads the tile of inputs that tap reads, shifted back in time: inputs before the chunk come from
the conv state (rounded to x's dtype, as the models' ``cat`` does), inputs inside it from x
through its strides, so no padded copy of x is made. The taps accumulate in float32, then bias
and SiLU, one rounding into the token-major output. The programs of the first token block also
write the next conv state, the last K inputs of ``cat(state, x)``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ssmscan.ops.common.host_math import cdiv, next_pow2
from ssmscan.ops.common.triton_launch import launcher


@triton.jit
def _causal_conv1d_fwd_kernel(
    x,  # (batch, L, dim), strided
    state,  # (batch, dim, K), strided, or a placeholder
    w,  # (dim, K), strided
    bias,  # (dim,), strided, or a placeholder
    out,  # (batch, L, dim) out, x's dtype, dense: token- or channel-major (s_o_*)
    new_state,  # (batch, dim, K) out, contiguous, x's dtype
    L,  # tokens
    dim,  # channels
    s_x_b,  # x strides: batch, token, channel
    s_x_l,
    s_x_d,
    s_s_b,  # state strides: batch, channel, tap
    s_s_d,
    s_s_k,
    s_w_d,  # weight strides: channel, tap
    s_w_k,
    s_bias_d,  # bias stride
    s_o_b,  # out strides: batch, token, channel
    s_o_l,
    s_o_d,
    K: tl.constexpr,  # taps
    KP: tl.constexpr,  # K rounded up to a power of two
    BLOCK_L: tl.constexpr,
    BLOCK_D: tl.constexpr,
    HAS_STATE: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    SILU: tl.constexpr,
):
    i_b = tl.program_id(0).to(tl.int64)
    i_l = tl.program_id(1)
    i_d = tl.program_id(2).to(tl.int64)
    o_l = i_l.to(tl.int64) * BLOCK_L + tl.arange(0, BLOCK_L).to(tl.int64)
    o_d = i_d * BLOCK_D + tl.arange(0, BLOCK_D).to(tl.int64)
    m_l = o_l < L
    m_d = o_d < dim
    x_b = x + i_b * s_x_b
    s_b = state + i_b * s_s_b
    acc = tl.zeros((BLOCK_L, BLOCK_D), dtype=tl.float32)
    for k in tl.static_range(K):
        t = o_l - (K - 1) + k  # the input time tap k reads; t < 0 is the state's entry K + t
        m_x = (m_l & (t >= 0))[:, None] & m_d[None, :]
        b_u = tl.load(x_b + t[:, None] * s_x_l + o_d[None, :] * s_x_d, mask=m_x, other=0.0)
        b_u = b_u.to(tl.float32)
        if HAS_STATE:
            m_s = (m_l & (t < 0))[:, None] & m_d[None, :]
            p_s = s_b + o_d[None, :] * s_s_d + (t + K)[:, None] * s_s_k
            b_s = tl.load(p_s, mask=m_s, other=0.0).to(x.dtype.element_ty)
            b_u += b_s.to(tl.float32)
        b_w = tl.load(w + o_d * s_w_d + k * s_w_k, mask=m_d, other=0.0).to(tl.float32)
        acc += b_u * b_w[None, :]
    if HAS_BIAS:
        acc += tl.load(bias + o_d * s_bias_d, mask=m_d, other=0.0).to(tl.float32)[None, :]
    if SILU:
        acc = acc / (1.0 + tl.exp(-acc))
    p_out = out + i_b * s_o_b + o_l[:, None] * s_o_l + o_d[None, :] * s_o_d
    tl.store(p_out, acc.to(out.dtype.element_ty), mask=m_l[:, None] & m_d[None, :])
    if i_l == 0:
        # the next state: entry j is input L - K + j of x, or the old state's entry L + j
        o_k = tl.arange(0, KP).to(tl.int64)
        t_n = L - K + o_k
        m_k = o_k < K
        m_xn = (m_k & (t_n >= 0))[None, :] & m_d[:, None]
        b_n = tl.load(x_b + t_n[None, :] * s_x_l + o_d[:, None] * s_x_d, mask=m_xn, other=0.0)
        if HAS_STATE:
            m_sn = (m_k & (t_n < 0))[None, :] & m_d[:, None]
            p_sn = s_b + o_d[:, None] * s_s_d + (t_n + K)[None, :] * s_s_k
            b_sn = tl.load(p_sn, mask=m_sn, other=0.0).to(x.dtype.element_ty)
            b_n = tl.where((t_n >= 0)[None, :], b_n, b_sn)
        p_ns = new_state + i_b * dim * K + o_d[:, None] * K + o_k[None, :]
        tl.store(p_ns, b_n, mask=m_d[:, None] & m_k[None, :])


def launch(
    x: torch.Tensor,
    conv_state: torch.Tensor | None,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    silu: bool,
    out: torch.Tensor,
    new_state: torch.Tensor,
) -> None:
    """The convolution into the preallocated ``out`` (batch, L, dim), any strides (the op makes it
    token- or channel-major as x is), and the contiguous ``new_state`` (batch, dim, K), both in
    x's dtype; args as ``ssmscan::causal_conv1d``. The outputs must not overlap the inputs."""
    batch, length, dim = (int(s) for s in x.shape)
    K = int(weight.shape[1])
    if batch == 0 or dim == 0:
        return
    block_d = min(64, next_pow2(dim))
    block_l = min(32, next_pow2(max(length, 1)))
    grid = (batch, max(1, cdiv(length, block_l)), cdiv(dim, block_d))
    launcher(_causal_conv1d_fwd_kernel)[grid](
        x,
        conv_state if conv_state is not None else x,
        weight,
        bias,
        out,
        new_state,
        length,
        dim,
        *x.stride(),
        *(conv_state.stride() if conv_state is not None else (0, 0, 0)),
        *weight.stride(),
        bias.stride(0) if bias is not None else 0,
        *out.stride(),
        K=K,
        KP=next_pow2(K),
        BLOCK_L=block_l,
        BLOCK_D=block_d,
        HAS_STATE=conv_state is not None,
        HAS_BIAS=bias is not None,
        SILU=silu,
        num_warps=4 if block_l * block_d >= 2048 else 1,
    )
