"""Comparison of a result against the float64 reference."""

from __future__ import annotations

import torch

from ssmscan.testing.tolerances import tolerance


def rel_error(x: torch.Tensor, ref: torch.Tensor) -> float:
    """``max|x - ref| / max|ref|`` in float64; NaN anywhere in ``x`` (and not in ``ref``) gives inf."""
    x64, r64 = x.detach().to(torch.float64).cpu(), ref.detach().to(torch.float64).cpu()
    if x64.shape != r64.shape:
        raise AssertionError(f"shape {tuple(x64.shape)} != reference shape {tuple(r64.shape)}")
    if x64.numel() == 0:
        return 0.0
    if bool((torch.isnan(x64) & ~torch.isnan(r64)).any()):
        return float("inf")
    scale = r64.abs().max().item()
    return (x64 - r64).abs().max().item() / (scale if scale > 0 else 1.0)


def assert_close_to_reference(
    name: str, x: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype, factor: float = 1.0
) -> None:
    """Assert ``rel_error(x, ref) <= factor * tolerance(dtype)`` with a message naming ``name``."""
    err = rel_error(x, ref)
    tol = factor * tolerance(dtype)
    if not err <= tol:
        raise AssertionError(f"{name}: relative error {err:.3e} > tolerance {tol:.1e} ({dtype})")
