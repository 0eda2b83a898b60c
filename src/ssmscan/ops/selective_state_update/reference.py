"""One selective-scan step, written out plainly: the oracle for ``selective_state_update``."""

from __future__ import annotations

import math

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
    state_batch_indices: torch.Tensor | None = None,
    compute_dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One step of h_t = exp(dt A) h_{t-1} + dt B x, y = C h_t + D x, out = y silu(z).

    Both layouts flatten to channels: Mamba-2's (nheads, headdim) is channel
    c = head * headdim + p, and group g of B / C serves channels c with c // (channels / G) == g,
    which is head // (nheads / G) for Mamba-2 and the grouped Mamba-1 rule alike.

    Args:
        state: (rows, dim, N) (Mamba-1) or (rows, nheads, headdim, N) (Mamba-2), h_{t-1}.
        x, dt, z: (batch, dim) or (batch, nheads, headdim).
        A: (dim, N) or (nheads, headdim, N).
        B, C: (batch, N) or grouped (batch, G, N).
        D, dt_bias: (dim,) or (nheads, headdim).
        state_batch_indices: (batch,) int or None: the state row of each batch entry (negative: a
            padding entry, output zero, no row written). None: row b for entry b (rows == batch).
        compute_dtype: arithmetic dtype; default float64 for float64 state, else float32.

    Returns:
        (out shaped like x in x's dtype, new state shaped like ``state`` in its dtype: the rows
        not picked are ``state``'s). Nothing is modified in place.

    Example:
        >>> import torch
        >>> out, h = selective_state_update_reference(torch.zeros(1, 2, 3), torch.ones(1, 2),
        ...     torch.full((1, 2), 0.1), -torch.ones(2, 3), torch.ones(1, 3), torch.ones(1, 3))
        >>> out.shape, h.shape
        (torch.Size([1, 2]), torch.Size([1, 2, 3]))
    """
    cdt = compute_dtype or (torch.float64 if state.dtype == torch.float64 else torch.float32)
    y, h = updated_rows(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, state_batch_indices, cdt)
    rows, N, ch = state.shape[0], state.shape[-1], h.shape[1]
    flat = state.reshape(rows, ch, N)
    if state_batch_indices is None:
        new_state = h.to(state.dtype).reshape(state.shape)
    else:
        # padding entries (negative index) write a spare row past the end, dropped afterwards
        valid = state_batch_indices >= 0
        target = torch.where(valid, state_batch_indices, torch.full_like(state_batch_indices, rows))
        spare = flat.new_zeros((1, ch, N))
        new_flat = torch.cat([flat, spare]).index_copy(0, target.long(), h.to(state.dtype))
        new_state = new_flat[:rows].reshape(state.shape)
    return y.to(x.dtype).reshape(x.shape), new_state


def updated_rows(
    state: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    dt_bias: torch.Tensor | None,
    dt_softplus: bool,
    state_batch_indices: torch.Tensor | None,
    cdt: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The step on channels flattened, in ``cdt``: (y (batch, channels), the new state of each
    batch entry's row (batch, channels, N)); padding entries give y = 0 (their row is row 0's,
    updated, and must not be written back)."""
    rows, N = state.shape[0], state.shape[-1]
    ch = math.prod(x.shape[1:])

    def chan(t: torch.Tensor) -> torch.Tensor:  # (batch, *channel dims) -> (batch, ch)
        return t.to(cdt).reshape(t.shape[0], ch)

    d = chan(dt)
    if dt_bias is not None:
        d = d + dt_bias.to(cdt).reshape(ch)
    if dt_softplus:
        d = F.softplus(d)
    if B.dim() == 2:
        BB, CC = B.to(cdt)[:, None], C.to(cdt)[:, None]
    else:
        groups = B.shape[1]
        BB = B.to(cdt).repeat_interleave(ch // groups, dim=1)
        CC = C.to(cdt).repeat_interleave(ch // groups, dim=1)
    flat = state.reshape(rows, ch, N)
    if state_batch_indices is None:
        h0 = flat.to(cdt)
    else:
        h0 = flat.index_select(0, state_batch_indices.clamp_min(0)).to(cdt)
    xx = chan(x)
    h = torch.exp(d[..., None] * A.to(cdt).reshape(ch, N)) * h0 + (d * xx)[..., None] * BB
    y = (h * CC).sum(-1)
    if D is not None:
        y = y + D.to(cdt).reshape(ch) * xx
    if z is not None:
        y = y * F.silu(chan(z))
    if state_batch_indices is not None:
        y = torch.where((state_batch_indices >= 0)[:, None], y, torch.zeros_like(y))
    return y, h
