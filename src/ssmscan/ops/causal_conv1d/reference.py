"""The causal depthwise convolution of a chunk written out plainly, in float64: the oracle for
``ssmscan::causal_conv1d``."""

from __future__ import annotations

import torch


def causal_conv1d_reference(
    x: torch.Tensor,
    conv_state: torch.Tensor | None,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    silu: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Output t is ``sum_k w[:, k] * u[t + 1 + k] + bias`` over ``u = cat(conv_state, x)`` along
    time (the state rounded to x's dtype; zeros when None), through SiLU when asked; the next state
    is u's last K entries (causal-conv1d's ``causal_conv1d_fn`` with ``initial_states`` and
    ``return_final_states``, in the (batch, L, dim) layout).

    Args:
        x: (batch, L, dim).
        conv_state: (batch, dim, K) the K inputs before x, oldest first, or None (zeros).
        weight: (dim, K).
        bias: (dim,) or None.
        silu: apply SiLU to the output.

    Returns:
        ``(out (batch, L, dim) float64, new_conv_state (batch, dim, K) in x's dtype)``.

    Example:
        >>> import torch
        >>> from ssmscan.ops.causal_conv1d.reference import causal_conv1d_reference
        >>> out, state = causal_conv1d_reference(torch.ones(1, 3, 1), None, torch.ones(1, 2),
        ...     None, False)
        >>> out[0, :, 0], state
        (tensor([1., 2., 2.], dtype=torch.float64), tensor([[[1., 1.]]]))
    """
    batch, length, dim = x.shape
    K = weight.shape[1]
    if conv_state is None:
        conv_state = x.new_zeros(batch, dim, K)
    u = torch.cat([conv_state.to(x.dtype), x.transpose(1, 2)], dim=-1)  # (batch, dim, K + L)
    ud, wd = u.double(), weight.double()
    out = torch.zeros(batch, dim, length, dtype=torch.float64, device=x.device)
    for k in range(K):
        out += wd[:, k, None] * ud[:, :, 1 + k : 1 + k + length]
    if bias is not None:
        out += bias.double()[:, None]
    if silu:
        out = out * torch.sigmoid(out)
    return out.transpose(1, 2), u[:, :, u.shape[-1] - K :].contiguous()
