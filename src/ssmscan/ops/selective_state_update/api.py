"""``ssmscan.selective_state_update``: one decode step of the selective scan."""

from __future__ import annotations

import torch

from ssmscan.ops.selective_state_update import op as _op  # noqa: F401  (registers the op)


def selective_state_update(
    state: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    dt_softplus: bool = False,
) -> torch.Tensor:
    """One step h = exp(dt A) h + dt B x, out = (C h + D x) * silu(z), updating ``state`` in place.

    Same signature and behaviour as mamba-ssm's ``selective_state_update``: ``state`` is
    overwritten with the new state and ``out`` returned. The underlying op
    ``torch.ops.ssmscan.selective_state_update`` is functional and returns ``(out, new_state)``;
    call it directly (e.g. in exported programs) to keep states immutable.

    Args:
        state: (batch, dim, N), float32/float16/bfloat16/float64; updated in place.
        x, dt: (batch, dim); z: (batch, dim) or None.
        A: (dim, N) float32.
        B, C: (batch, N) or grouped (batch, G, N), dtype of x or float32.
        D, dt_bias: (dim,) float32 or None.
        dt_softplus: dt = softplus(dt + dt_bias).

    Returns:
        out (batch, dim) in x's dtype.

    Example:
        >>> import torch, ssmscan
        >>> h = torch.zeros(1, 2, 3)
        >>> out = ssmscan.selective_state_update(h, torch.ones(1, 2), torch.full((1, 2), 0.1),
        ...     -torch.ones(2, 3), torch.ones(1, 3), torch.ones(1, 3))
        >>> out.shape, bool(h.abs().sum() > 0)
        (torch.Size([1, 2]), True)
    """
    if state.dim() != 3 or x.dim() != 2 or dt.shape != x.shape:
        raise ValueError(
            f"expected state (batch, dim, N), x and dt (batch, dim); got state "
            f"{tuple(state.shape)}, x {tuple(x.shape)}, dt {tuple(dt.shape)}"
        )
    if B.shape != C.shape or B.dim() not in (2, 3):
        raise ValueError(
            f"B and C must both be (batch, N) or (batch, G, N); got {tuple(B.shape)}, {tuple(C.shape)}"
        )
    out, new_state = torch.ops.ssmscan.selective_state_update(
        state, x, dt, A, B, C, D, z, dt_bias, dt_softplus
    )
    state.copy_(new_state)
    return out
