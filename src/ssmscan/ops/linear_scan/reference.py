"""Sequential first-order affine recurrence: the oracle for ``linear_scan``."""

from __future__ import annotations

import torch


def linear_scan_reference(
    a: torch.Tensor,
    b: torch.Tensor,
    dim: int = -1,
    reverse: bool = False,
    initial: torch.Tensor | None = None,
    compute_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """h_t = a_t * h_{t-1} + b_t along ``dim`` (from the end when ``reverse``), h_{-1} = initial or 0.

    Args:
        a, b: same shape and dtype.
        dim: the time dimension.
        reverse: scan from the last index to the first.
        initial: ``a``'s shape without ``dim``; zeros when None.
        compute_dtype: arithmetic dtype; default float64 for float64 inputs, else float32.

    Returns:
        h, shaped and typed like ``b``.

    Example:
        >>> import torch
        >>> linear_scan_reference(torch.full((3,), 0.5), torch.ones(3))
        tensor([1.0000, 1.5000, 1.7500])
    """
    cdt = compute_dtype or (torch.float64 if b.dtype == torch.float64 else torch.float32)
    aa = a.to(cdt).movedim(dim, 0)
    bb = b.to(cdt).movedim(dim, 0)
    L = aa.shape[0]
    if L == 0:
        return b.clone()
    h = initial.to(cdt) if initial is not None else torch.zeros_like(bb[0])
    order = range(L - 1, -1, -1) if reverse else range(L)
    hs: list[torch.Tensor] = [bb[0]] * L
    for t in order:
        h = aa[t] * h + bb[t]
        hs[t] = h
    return torch.stack(hs, 0).movedim(0, dim).to(b.dtype)
