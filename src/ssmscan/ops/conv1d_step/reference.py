"""One step of the causal depthwise convolution written out plainly, in float64: the oracle for
``ssmscan::conv1d_step``."""

from __future__ import annotations

import torch


def conv1d_step_reference(
    x: torch.Tensor,
    conv_state: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    silu: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The conv state shifted by one token with x (rounded to the state's dtype) appended, and the
    depthwise dot product of the new state with the weight, plus bias, through SiLU when asked
    (causal-conv1d's ``causal_conv1d_update`` with state length = width).

    Args:
        x: (batch, dim) the new token.
        conv_state: (batch, dim, K) the last K inputs, oldest first.
        weight: (dim, K).
        bias: (dim,) or None.
        silu: apply SiLU to the output.

    Returns:
        ``(out (batch, dim) float64, new_conv_state (batch, dim, K) in conv_state's dtype)``.

    Example:
        >>> import torch
        >>> from ssmscan.ops.conv1d_step.reference import conv1d_step_reference
        >>> out, state = conv1d_step_reference(torch.ones(1, 1), torch.zeros(1, 1, 2),
        ...     torch.ones(1, 2), None, False)
        >>> out, state
        (tensor([[1.]], dtype=torch.float64), tensor([[[0., 1.]]]))
    """
    new_state = torch.cat([conv_state[:, :, 1:], x[:, :, None].to(conv_state.dtype)], dim=-1)
    out = (new_state.double() * weight.double()).sum(-1)
    if bias is not None:
        out = out + bias.double()
    if silu:
        out = out * torch.sigmoid(out)
    return out, new_state
