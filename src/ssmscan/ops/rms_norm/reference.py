"""The RMS norms written out plainly, in float64: the oracle for ``ssmscan::rms_norm`` and
``ssmscan::gated_rms_norm``."""

from __future__ import annotations

import torch


def gated_rms_norm_reference(
    x: torch.Tensor,
    z: torch.Tensor | None,
    weight: torch.Tensor,
    eps: float,
    group_size: int,
    norm_before_gate: bool,
) -> torch.Tensor:
    """mamba-ssm's gated, grouped RMSNorm in float64: ``norm(x * silu(z)) * weight``
    (``norm_before_gate=False``) or ``norm(x) * weight * silu(z)``, each group of ``group_size``
    channels normalised on its own.

    Args:
        x: (..., dim) any float dtype.
        z: (..., dim) or None (no gate).
        weight: (dim,).
        eps: added to each group's mean square.
        group_size: channels per group, dividing dim.
        norm_before_gate: where the gate is applied.

    Returns:
        (..., dim) float64.

    Example:
        >>> import torch
        >>> from ssmscan.ops.rms_norm.reference import gated_rms_norm_reference
        >>> gated_rms_norm_reference(torch.tensor([[3.0, 3.0]]), None, torch.ones(2), 0.0, 2, False)
        tensor([[1., 1.]], dtype=torch.float64)
    """
    h = x.double()
    zz = z.double() if z is not None else None
    if zz is not None and not norm_before_gate:
        h = h * zz * torch.sigmoid(zz)
    g = h.unflatten(-1, (-1, group_size))
    h = (g / torch.sqrt(g.pow(2).mean(-1, keepdim=True) + eps)).flatten(-2) * weight.double()
    if zz is not None and norm_before_gate:
        h = h * zz * torch.sigmoid(zz)
    return h


def rms_norm_reference(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``weight * y / sqrt(mean(y**2) + eps)`` in float64 with y = x rounded to weight's dtype
    (the pre-norm of a Mamba block, ``RMSNorm(x.to(weight.dtype))``).

    Args:
        x: (..., dim) any float dtype.
        weight: (dim,).
        eps: added to the mean square.

    Returns:
        (..., dim) float64.

    Example:
        >>> import torch
        >>> from ssmscan.ops.rms_norm.reference import rms_norm_reference
        >>> rms_norm_reference(torch.tensor([[2.0, 2.0]]), torch.ones(2), 0.0)
        tensor([[1., 1.]], dtype=torch.float64)
    """
    y = x.to(weight.dtype).double()
    return weight.double() * y / torch.sqrt(y.pow(2).mean(-1, keepdim=True) + eps)


def add_rms_norm_reference(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``h = residual + x`` rounded to their promoted dtype, then ``rms_norm_reference(h)``.

    Args:
        x: (..., dim) any float dtype.
        residual: (..., dim) any float dtype.
        weight: (dim,).
        eps: added to the mean square.

    Returns:
        ``(normed (..., dim) float64, h (..., dim) in the promoted dtype)``.

    Example:
        >>> import torch
        >>> from ssmscan.ops.rms_norm.reference import add_rms_norm_reference
        >>> add_rms_norm_reference(torch.ones(1, 2), torch.ones(1, 2), torch.ones(2), 0.0)[1]
        tensor([[2., 2.]])
    """
    h = (x.double() + residual.double()).to(torch.promote_types(x.dtype, residual.dtype))
    return rms_norm_reference(h, weight, eps), h
