"""One conv step in aten ops (float32 arithmetic, float64 for float64 inputs): the op's path off
CUDA (and for float64 on CUDA)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def conv1d_step(
    x: torch.Tensor,
    conv_state: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    silu: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Args as ``ssmscan::conv1d_step``; ``(out in x's dtype, new_conv_state)``."""
    cdt = torch.float64 if torch.float64 in (x.dtype, conv_state.dtype) else torch.float32
    new_state = torch.cat([conv_state[:, :, 1:], x[:, :, None].to(conv_state.dtype)], dim=-1)
    out = (new_state.to(cdt) * weight.to(cdt)).sum(-1)
    if bias is not None:
        out = out + bias.to(cdt)
    if silu:
        out = F.silu(out)
    return out.to(x.dtype), new_state
