"""Input factories producing realistic, never-zero inputs.

Selective scan inputs follow Mamba's initialisation: A = -exp(0.5 * randn) (decays spread over
about two orders of magnitude), dt in [1e-3, 0.1] log-uniform, reached through an inverse-softplus
``delta_bias`` when ``delta_softplus`` is on (as Mamba's dt projection bias does).
"""

from __future__ import annotations

import math
from typing import Any

import torch


def _inverse_softplus(y: torch.Tensor) -> torch.Tensor:
    return y + torch.log(-torch.expm1(-y))


def make_selective_scan_inputs(
    batch: int,
    dim: int,
    L: int,
    N: int,
    groups: int | None = None,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    has_D: bool = True,
    has_z: bool = True,
    has_delta_bias: bool = True,
    delta_softplus: bool = True,
    has_initial_state: bool = False,
    seed: int = 0,
    requires_grad: bool = False,
) -> dict[str, Any]:
    """Keyword arguments for ``ssmscan.selective_scan``.

    Args:
        batch, dim, L, N: sizes; ``groups`` None gives 3-D B/C (batch, N, L), an int G gives
            grouped (batch, G, N, L).
        dtype: dtype of u, delta, z, B, C (A, D, delta_bias and the state are float32, or float64
            for float64).
        has_*: include the optional inputs.
        seed: inputs are drawn from a generator seeded with this.
        requires_grad: make every tensor a leaf requiring grad.

    Returns:
        dict with u, delta, A, B, C, D, z, delta_bias, delta_softplus, initial_state.
    """
    g = torch.Generator().manual_seed(seed)
    pdt = torch.float64 if dtype == torch.float64 else torch.float32

    def randn(*shape: int, dt: torch.dtype = dtype) -> torch.Tensor:
        return torch.randn(*shape, generator=g, dtype=torch.float64).to(dt)

    log_lo, log_hi = math.log(1e-3), math.log(1e-1)
    dt_target = torch.exp(
        torch.rand(batch, dim, L, generator=g, dtype=torch.float64) * (log_hi - log_lo) + log_lo
    )
    bias = (
        torch.exp(torch.rand(dim, generator=g, dtype=torch.float64) * (log_hi - log_lo) + log_lo)
        if has_delta_bias
        else None
    )
    if delta_softplus:
        # delta + bias = softplus^-1(dt): the bias carries the per-channel mean, delta the rest
        pre = _inverse_softplus(dt_target)
        delta = pre - (_inverse_softplus(bias)[:, None] if bias is not None else 0.0)
        bias_param = _inverse_softplus(bias) if bias is not None else None
    else:
        delta = dt_target - (bias[:, None] if bias is not None else 0.0)
        bias_param = bias
    bc_shape = (batch, N, L) if groups is None else (batch, groups, N, L)
    out: dict[str, Any] = {
        "u": randn(batch, dim, L),
        "delta": delta.to(dtype),
        "A": -torch.exp(0.5 * randn(dim, N, dt=torch.float64)).to(pdt),
        "B": randn(*bc_shape),
        "C": randn(*bc_shape),
        "D": randn(dim, dt=pdt) if has_D else None,
        "z": randn(batch, dim, L) if has_z else None,
        "delta_bias": bias_param.to(pdt) if bias_param is not None else None,
        "delta_softplus": delta_softplus,
        "initial_state": 0.5 * randn(batch, dim, N, dt=pdt) if has_initial_state else None,
    }
    for k, v in out.items():
        if isinstance(v, torch.Tensor):
            v = v.to(device)
            out[k] = v.requires_grad_() if requires_grad else v
    return out


def make_linear_scan_inputs(
    shape: tuple[int, ...],
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    seed: int = 0,
    requires_grad: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(a, b) for ``linear_scan``: decays a in (0.5, 1) (as LRU/RG-LRU), inputs b ~ N(0, 1)."""
    g = torch.Generator().manual_seed(seed)
    a = (0.5 + 0.5 * torch.rand(shape, generator=g, dtype=torch.float64)).to(dtype).to(device)
    b = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype).to(device)
    if requires_grad:
        a.requires_grad_()
        b.requires_grad_()
    return a, b
