"""Registration of ``ssmscan::conv1d_step``: one decode step of a causal depthwise convolution,
functional (returns the next state, mutates nothing), forward only.

CUDA (float16 / bfloat16 / float32): one Triton kernel (``triton_fwd``); elsewhere, and for
float64, the aten math of ``cpu``.

Example:
    >>> import torch
    >>> import ssmscan.ops.conv1d_step.op  # registers the op
    >>> out, state = torch.ops.ssmscan.conv1d_step(torch.ones(1, 2), torch.zeros(1, 2, 3),
    ...     torch.ones(2, 3), None, False)
    >>> out, state[0, 0]
    (tensor([[1., 1.]]), tensor([0., 0., 1.]))
"""

from __future__ import annotations

import torch

from ssmscan._library import triton_backed_op
from ssmscan.ops.common.checks import (
    FLOAT_DTYPES,
    check_dtype,
    check_ndim,
    check_same_device,
    check_shape,
    check_tensor,
)
from ssmscan.ops.conv1d_step import cpu


def _check(
    x: torch.Tensor, conv_state: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
) -> None:
    for name, t in (("x", x), ("conv_state", conv_state), ("weight", weight)):
        check_tensor(name, t)
        check_dtype(name, t, FLOAT_DTYPES)
    check_ndim("conv_state", conv_state, (3,), "(batch, dim, K)")
    batch, dim, K = conv_state.shape
    check_shape("x", x, (batch, dim), "(batch, dim) as conv_state (batch, dim, K)")
    check_shape("weight", weight, (dim, K), "(dim, K) as conv_state (batch, dim, K)")
    named: list[tuple[str, torch.Tensor | None]] = [
        ("x", x),
        ("conv_state", conv_state),
        ("weight", weight),
    ]
    if bias is not None:
        check_tensor("bias", bias)
        check_dtype("bias", bias, FLOAT_DTYPES)
        check_shape("bias", bias, (dim,), "(dim,) as conv_state (batch, dim, K)")
        named.append(("bias", bias))
    check_same_device(named)


def _fused(x: torch.Tensor, conv_state: torch.Tensor, weight: torch.Tensor) -> bool:
    dtypes = (x.dtype, conv_state.dtype, weight.dtype)
    return x.device.type == "cuda" and torch.float64 not in dtypes


@triton_backed_op("conv1d_step")
def conv1d_step(
    x: torch.Tensor,
    conv_state: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    silu: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One decode step of a causal depthwise convolution (causal-conv1d's
    ``causal_conv1d_update`` with state length = width, functional): the state shifted by one token
    with x (in the state's dtype) appended, and ``sum_k new_state[:, :, k] * weight[:, k] + bias``,
    through SiLU when ``silu``; float32 arithmetic (float64 for float64 inputs).

    Args:
        x: (batch, dim) the new token.
        conv_state: (batch, dim, K) the last K inputs, oldest first; not modified.
        weight: (dim, K) depthwise taps (``conv1d.weight[:, 0, :]``).
        bias: (dim,) or None.
        silu: apply SiLU to the output.

    Returns:
        ``(out (batch, dim) in x's dtype, new_conv_state (batch, dim, K) in conv_state's dtype)``,
        fresh and contiguous.
    """
    _check(x, conv_state, weight, bias)
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    new_state = torch.empty(conv_state.shape, dtype=conv_state.dtype, device=conv_state.device)
    if _fused(x, conv_state, weight):
        from ssmscan.ops.conv1d_step import triton_fwd

        triton_fwd.launch(x, conv_state, weight, bias, silu, out, new_state)
        return out, new_state
    y, s = cpu.conv1d_step(x, conv_state, weight, bias, silu)
    out.copy_(y)
    new_state.copy_(s)
    return out, new_state
