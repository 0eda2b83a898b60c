"""Sequential, readable selective scan: the oracle every fast path is tested against.

Never imports a fast path. Computes in ``compute_dtype`` (float64 for exact comparisons).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ssmscan.ops.selective_scan.shapes import state_dtype


def selective_scan_reference(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    delta_bias: torch.Tensor | None = None,
    delta_softplus: bool = False,
    return_last_state: bool = False,
    initial_state: torch.Tensor | None = None,
    compute_dtype: torch.dtype | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Selective scan, one timestep at a time.

    For batch b, channel d, state n, time t::

        dt_t  = softplus(delta_t + delta_bias)        (bias and softplus optional)
        h_t   = exp(dt_t * A[d, n]) * h_{t-1} + dt_t * B_t[n] * u_t
        y_t   = sum_n C_t[n] * h_t[n] + D[d] * u_t
        out_t = y_t * silu(z_t)                        (z optional)

    Args:
        u, delta, z: (batch, dim, L).
        A: (dim, N).
        B, C: (batch, N, L) or grouped (batch, G, N, L); channel d uses group d // (dim // G).
        D, delta_bias: (dim,).
        initial_state: (batch, dim, N), h_{-1}; zeros when None.
        compute_dtype: dtype of all arithmetic; default float64 for float64 ``u``, else float32.

    Returns:
        ``out`` (batch, dim, L) in ``u``'s dtype, and with ``return_last_state`` also ``h_{L-1}``
        (batch, dim, N) in the state dtype (float64 for float64 ``u``, else float32).

    Example:
        >>> import torch
        >>> u, dt = torch.randn(1, 4, 5), torch.rand(1, 4, 5) * 0.1
        >>> A, B, C = -torch.rand(4, 2), torch.randn(1, 2, 5), torch.randn(1, 2, 5)
        >>> selective_scan_reference(u, dt, A, B, C).shape
        torch.Size([1, 4, 5])
    """
    cdt = compute_dtype or state_dtype(u.dtype)
    batch, dim, L = u.shape
    N = A.shape[1]
    uu, dd, AA = u.to(cdt), delta.to(cdt), A.to(cdt)
    if delta_bias is not None:
        dd = dd + delta_bias.to(cdt)[:, None]
    if delta_softplus:
        dd = F.softplus(dd)
    # Expand B, C to one (batch, dim, N, L) view: group g serves dim // G consecutive channels.
    if B.dim() == 3:
        BB = B.to(cdt)[:, None].expand(batch, dim, N, L)
        CC = C.to(cdt)[:, None].expand(batch, dim, N, L)
    else:
        groups = B.shape[1]
        BB = B.to(cdt).repeat_interleave(dim // groups, dim=1)
        CC = C.to(cdt).repeat_interleave(dim // groups, dim=1)

    h = (
        initial_state.to(cdt).clone()
        if initial_state is not None
        else torch.zeros(batch, dim, N, dtype=cdt, device=u.device)
    )
    ys = []
    for t in range(L):
        dt = dd[:, :, t, None]  # (batch, dim, 1)
        h = torch.exp(dt * AA) * h + dt * BB[..., t] * uu[:, :, t, None]
        ys.append((h * CC[..., t]).sum(-1))
    y = torch.stack(ys, dim=-1) if L > 0 else uu.new_zeros(batch, dim, 0)
    if D is not None:
        y = y + D.to(cdt)[:, None] * uu
    if z is not None:
        y = y * F.silu(z.to(cdt))
    out = y.to(u.dtype)
    if return_last_state:
        return out, h.to(state_dtype(u.dtype))
    return out
