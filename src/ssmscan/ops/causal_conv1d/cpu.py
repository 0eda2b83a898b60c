"""The chunk convolution in aten ops, as the models compute it (``cat`` with the state,
``F.conv1d`` in x's dtype, SiLU): the op's path off CUDA and for float64."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def causal_conv1d(
    x: torch.Tensor,
    conv_state: torch.Tensor | None,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    silu: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Args as ``ssmscan::causal_conv1d``; ``(out (batch, L, dim), new_conv_state)`` in x's dtype
    (``out`` a transposed view)."""
    batch, length, dim = x.shape
    K = weight.shape[1]
    head = x.new_zeros(batch, dim, K) if conv_state is None else conv_state.to(x.dtype)
    u = torch.cat([head, x.transpose(1, 2)], dim=-1)
    if length == 0:  # F.conv1d refuses an input shorter than its kernel
        return x.new_empty(batch, 0, dim), u
    out = F.conv1d(
        u[:, :, 1:],
        weight.to(x.dtype)[:, None, :],
        None if bias is None else bias.to(x.dtype),
        groups=dim,
    )
    if silu:
        out = F.silu(out)
    return out.transpose(1, 2), u[:, :, u.shape[-1] - K :]
