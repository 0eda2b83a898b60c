"""Registration of ``ssmscan::causal_conv1d``: a causal depthwise convolution over a chunk of
tokens in the (batch, L, dim) layout of an input projection's output, continuing from a conv
state, functional (returns the next state, mutates nothing), forward only.

CUDA (float16 / bfloat16 / float32): one Triton kernel (``triton_fwd``) that reads x through its
strides and the state in place of the left padding; elsewhere, and for float64, the aten ops of
``cpu`` (``cat`` + ``F.conv1d``).

Example:
    >>> import torch
    >>> import ssmscan.ops.causal_conv1d.op  # registers the op
    >>> out, state = torch.ops.ssmscan.causal_conv1d(torch.ones(1, 3, 2), None,
    ...     torch.ones(2, 2), None, False)
    >>> out[0, :, 0], state[0, 0]
    (tensor([1., 2., 2.]), tensor([1., 1.]))
"""

from __future__ import annotations

import torch

from ssmscan._library import triton_backed_op
from ssmscan.ops.causal_conv1d import cpu
from ssmscan.ops.common.checks import (
    FLOAT_DTYPES,
    check_dtype,
    check_ndim,
    check_same_device,
    check_shape,
    check_tensor,
    describe,
)


def _check(
    x: torch.Tensor,
    conv_state: torch.Tensor | None,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
) -> None:
    check_tensor("x", x)
    check_dtype("x", x, FLOAT_DTYPES)
    check_ndim("x", x, (3,), "(batch, L, dim)")
    check_tensor("weight", weight)
    check_dtype("weight", weight, FLOAT_DTYPES)
    if weight.dim() != 2 or weight.shape[0] != x.shape[2] or weight.shape[1] < 1:
        raise ValueError(
            f"weight must be (dim, K) with dim={x.shape[2]} as x (batch, L, dim) and K >= 1; "
            f"got {describe(weight)}"
        )
    batch, _, dim = x.shape
    K = weight.shape[1]
    named: list[tuple[str, torch.Tensor | None]] = [("x", x), ("weight", weight)]
    if conv_state is not None:
        check_tensor("conv_state", conv_state)
        check_dtype("conv_state", conv_state, FLOAT_DTYPES)
        check_shape(
            "conv_state", conv_state, (batch, dim, K), "(batch, dim, K) as x and weight (dim, K)"
        )
        named.append(("conv_state", conv_state))
    if bias is not None:
        check_tensor("bias", bias)
        check_dtype("bias", bias, FLOAT_DTYPES)
        check_shape("bias", bias, (dim,), "(dim,) as x (batch, L, dim)")
        named.append(("bias", bias))
    check_same_device(named)


def _fused(x: torch.Tensor, *others: torch.Tensor | None) -> bool:
    dtypes = [t.dtype for t in (x, *others) if t is not None]
    return x.device.type == "cuda" and torch.float64 not in dtypes


@triton_backed_op("causal_conv1d")
def causal_conv1d(
    x: torch.Tensor,
    conv_state: torch.Tensor | None,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    silu: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal depthwise convolution of a chunk (causal-conv1d's ``causal_conv1d_fn`` with
    ``initial_states`` and ``return_final_states``, token-major): with ``u = cat(conv_state, x)``
    along time (the state rounded to x's dtype, zeros when None), output t is
    ``sum_k weight[:, k] * u[t + 1 + k] + bias``, through SiLU when ``silu``, float32 arithmetic
    (float64 for float64 inputs); the next state is u's last K inputs.

    Args:
        x: (batch, L, dim), any strides (usually a slice of the input projection's output).
        conv_state: (batch, dim, K) the K inputs before x, oldest first, or None (zeros); not
            modified.
        weight: (dim, K) depthwise taps (``conv1d.weight[:, 0, :]``).
        bias: (dim,) or None.
        silu: apply SiLU to the output.

    Returns:
        ``(out (batch, L, dim), new_conv_state (batch, dim, K))``, both in x's dtype and fresh.
        The state is contiguous; out is laid out as x is: channel-major (a transposed contiguous
        (batch, dim, L) tensor) where x's time stride is 1 and its channel stride is not (x a
        slice of a channel-major projection, Note [channel-major prefill] in
        ``ssmscan.models.mamba``), contiguous otherwise.
    """
    _check(x, conv_state, weight, bias)
    batch, length, dim = x.shape
    K = weight.shape[1]
    if x.stride(1) == 1 and x.stride(2) != 1:
        out = torch.empty((batch, dim, length), dtype=x.dtype, device=x.device).transpose(1, 2)
    else:
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    new_state = torch.empty((batch, dim, K), dtype=x.dtype, device=x.device)
    if _fused(x, conv_state, weight, bias):
        from ssmscan.ops.causal_conv1d import triton_fwd

        triton_fwd.launch(x, conv_state, weight, bias, silu, out, new_state)
        return out, new_state
    y, s = cpu.causal_conv1d(x, conv_state, weight, bias, silu)
    out.copy_(y)
    new_state.copy_(s)
    return out, new_state
