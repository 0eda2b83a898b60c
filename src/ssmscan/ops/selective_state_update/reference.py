"""One selective-scan step, written out plainly: the oracle for ``selective_state_update``."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def selective_state_update_reference(
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
    compute_dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One step of h_t = exp(dt A) h_{t-1} + dt B x, y = C h_t + D x, out = y silu(z).

    Args:
        state: (batch, dim, N) h_{t-1}.
        x, dt, z: (batch, dim).
        A: (dim, N).
        B, C: (batch, N) or grouped (batch, G, N); channel d uses group d // (dim // G).
        D, dt_bias: (dim,).
        compute_dtype: arithmetic dtype; default float64 for float64 state, else float32.

    Returns:
        (out (batch, dim) in x's dtype, new state (batch, dim, N) in state's dtype). Nothing is
        modified in place.

    Example:
        >>> import torch
        >>> out, h = selective_state_update_reference(torch.zeros(1, 2, 3), torch.ones(1, 2),
        ...     torch.full((1, 2), 0.1), -torch.ones(2, 3), torch.ones(1, 3), torch.ones(1, 3))
        >>> out.shape, h.shape
        (torch.Size([1, 2]), torch.Size([1, 2, 3]))
    """
    cdt = compute_dtype or (torch.float64 if state.dtype == torch.float64 else torch.float32)
    dim = x.shape[1]
    d = dt.to(cdt)
    if dt_bias is not None:
        d = d + dt_bias.to(cdt)
    if dt_softplus:
        d = F.softplus(d)
    if B.dim() == 2:
        BB, CC = B.to(cdt)[:, None], C.to(cdt)[:, None]
    else:
        groups = B.shape[1]
        BB = B.to(cdt).repeat_interleave(dim // groups, dim=1)
        CC = C.to(cdt).repeat_interleave(dim // groups, dim=1)
    xx = x.to(cdt)
    h = torch.exp(d[..., None] * A.to(cdt)) * state.to(cdt) + (d * xx)[..., None] * BB
    y = (h * CC).sum(-1)
    if D is not None:
        y = y + D.to(cdt) * xx
    if z is not None:
        y = y * F.silu(z.to(cdt))
    return y.to(x.dtype), h.to(state.dtype)
