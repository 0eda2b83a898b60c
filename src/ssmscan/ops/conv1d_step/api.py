"""``conv1d_step_``: one decode step of a causal depthwise convolution with the state updated in
place (causal-conv1d's ``causal_conv1d_update``), for decode loops whose states live in static
buffers (CUDA graphs)."""

from __future__ import annotations

import torch
from torch.overrides import has_torch_function

from ssmscan.ops.conv1d_step import op as _op  # noqa: F401  (registers the op)


def _direct_cuda(x: torch.Tensor, conv_state: torch.Tensor, tensors: tuple) -> bool:
    """Whether the Triton kernel may write the state where it reads it: an eager call (nothing
    traced, no dispatch mode, no ``__torch_function__`` override) on plain CUDA tensors, no
    float64, a contiguous state (the kernel writes the new state in contiguous layout) and no
    gradient wanted."""
    return (
        x.device.type == "cuda"
        and torch.float64 not in (t.dtype for t in tensors)
        and conv_state.is_contiguous()
        and not torch.compiler.is_compiling()
        and not torch._C._len_torch_dispatch_stack()
        and not has_torch_function(tensors)
        and all(type(t) in (torch.Tensor, torch.nn.Parameter) for t in tensors)
        and not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors))
    )


def conv1d_step_(
    x: torch.Tensor,
    conv_state: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    silu: bool,
) -> torch.Tensor:
    """``ssmscan::conv1d_step`` with ``conv_state`` updated in place: the state shifted by one
    token with ``x`` appended, and the step's output returned.

    On CUDA in eager mode with a contiguous state the one Triton kernel writes the new state over
    the old (each program loads its channels' taps before it stores them, and no two programs
    share a channel). Elsewhere (CPU, float64, a strided state, ``torch.compile`` and
    ``torch.export``) the functional op runs and its state is copied back, which a traced graph
    keeps as an ordinary functional node and a copy.

    Args:
        x, conv_state, weight, bias, silu: as ``ssmscan::conv1d_step``; ``conv_state`` (batch,
            dim, K) is overwritten with the next state.

    Returns:
        ``out`` (batch, dim) in x's dtype, fresh.

    Example:
        >>> import torch
        >>> from ssmscan.ops.conv1d_step.api import conv1d_step_
        >>> state = torch.zeros(1, 2, 3)
        >>> out = conv1d_step_(torch.ones(1, 2), state, torch.ones(2, 3), None, False)
        >>> out, state[0, 0]
        (tensor([[1., 1.]]), tensor([0., 0., 1.]))
    """
    tensors = tuple(t for t in (x, conv_state, weight, bias) if t is not None)
    if _direct_cuda(x, conv_state, tensors):
        from torch._library.triton import set_wrap_triton_enabled

        from ssmscan.ops.conv1d_step import triton_fwd
        from ssmscan.ops.conv1d_step.op import _check

        _check(x, conv_state, weight, bias)
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        with set_wrap_triton_enabled(False):
            triton_fwd.launch(x, conv_state, weight, bias, silu, out, conv_state)
        return out
    out, new_state = torch.ops.ssmscan.conv1d_step(x, conv_state, weight, bias, silu)
    conv_state.copy_(new_state)
    return out
