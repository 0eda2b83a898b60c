"""The RMS norms in aten ops, float32 arithmetic (float64 for float64 inputs): the ops' path
off CUDA (and for float64 on CUDA). The same math as ``ssmscan.models``' ``GatedRMSNorm`` and
``RMSNorm``."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _cdt(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def gated_rms_norm(
    x: torch.Tensor,
    z: torch.Tensor | None,
    weight: torch.Tensor,
    eps: float,
    group_size: int,
    norm_before_gate: bool,
) -> torch.Tensor:
    """Args as ``ssmscan::gated_rms_norm``; (..., dim) in x's dtype."""
    cdt = _cdt(x.dtype)
    h = x.to(cdt)
    if z is not None and not norm_before_gate:
        h = h * F.silu(z.to(cdt))
    g = h.unflatten(-1, (-1, group_size))
    h = (g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + eps)).flatten(-2)
    h = h * weight.to(cdt)
    if z is not None and norm_before_gate:
        h = h * F.silu(z.to(cdt))
    return h.to(x.dtype)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Args as ``ssmscan::rms_norm``; (..., dim) in weight's dtype."""
    y = x.to(weight.dtype)
    cdt = _cdt(y.dtype)
    y32 = y.to(cdt)
    normed = y32 * torch.rsqrt(y32.pow(2).mean(-1, keepdim=True) + eps)
    return (weight.to(cdt) * normed).to(weight.dtype)
