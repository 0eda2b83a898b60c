"""The outputs of ``ssmscan::ssd_scan_fwd`` / ``ssd_scan_bwd``: every realization (CPU, Triton)
and every fake allocates them here, so real and fake shapes, dtypes and strides agree by
construction. All fresh and contiguous."""

from __future__ import annotations

import torch

from ssmscan.ops.ssd_scan.common import state_dtype


def empty_forward_outputs(x: torch.Tensor, B: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(out (batch, L, nheads, headdim) in x's dtype, final_states (batch, nheads, headdim,
    dstate) in the state dtype), contiguous.

    Example:
        >>> out, final = empty_forward_outputs(torch.empty(2, 5, 4, 3), torch.empty(2, 5, 1, 8))
        >>> tuple(out.shape), tuple(final.shape)
        ((2, 5, 4, 3), (2, 4, 3, 8))
    """
    batch, _, nheads, headdim = x.shape
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    final = torch.empty(
        (batch, nheads, headdim, B.shape[3]), dtype=state_dtype(x.dtype), device=x.device
    )
    return out, final


def _like(t: torch.Tensor) -> torch.Tensor:
    return torch.empty(t.shape, dtype=t.dtype, device=t.device)


def empty_backward_outputs(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    dt_bias: torch.Tensor | None,
    initial_states: torch.Tensor | None,
) -> tuple[
    torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, list[torch.Tensor]
]:
    """One contiguous gradient per differentiable input, in that input's shape and dtype; the
    optional inputs' gradients as a list in argument order (D, z, dt_bias, initial_states), only
    those given.

    Example:
        >>> x, dt, A = torch.empty(1, 3, 2, 4), torch.empty(1, 3, 2), torch.empty(2)
        >>> B = torch.empty(1, 3, 1, 8)
        >>> grads = empty_backward_outputs(x, dt, A, B, B, torch.empty(2), None, None, None)
        >>> [tuple(g.shape) for g in grads[:5]], len(grads[5])
        ([(1, 3, 2, 4), (1, 3, 2), (2,), (1, 3, 1, 8), (1, 3, 1, 8)], 1)
    """
    optional = [_like(t) for t in (D, z, dt_bias, initial_states) if t is not None]
    return _like(x), _like(dt), _like(A), _like(B), _like(C), optional
