"""Validation of ``selective_scan`` arguments (shapes, dtypes, devices)."""

from __future__ import annotations

import torch

from ssmscan.ops.common.checks import (
    FLOAT_DTYPES,
    check_dtype,
    check_ndim,
    check_same_device,
    check_shape,
    check_tensor,
    describe,
)
from ssmscan.ops.selective_scan.shapes import state_dtype


def param_dtypes(u_dtype: torch.dtype) -> tuple[torch.dtype, ...]:
    """Dtypes accepted for A, D and delta_bias: float32, or float64 as well for float64 inputs."""
    return (torch.float32, torch.float64) if u_dtype == torch.float64 else (torch.float32,)


def check_selective_scan_args(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    delta_bias: torch.Tensor | None,
    initial_state: torch.Tensor | None,
) -> None:
    """Raise ``TypeError``/``ValueError`` naming the first bad argument."""
    for name, t in (("u", u), ("delta", delta), ("A", A), ("B", B), ("C", C)):
        check_tensor(name, t)
    for name, opt in (
        ("D", D),
        ("z", z),
        ("delta_bias", delta_bias),
        ("initial_state", initial_state),
    ):
        if opt is not None:
            check_tensor(name, opt)

    check_ndim("u", u, (3,), "3-D (batch, dim, L)")
    check_dtype("u", u, FLOAT_DTYPES)
    batch, dim, L = u.shape
    check_shape("delta", delta, (batch, dim, L), "(batch, dim, L), like u")
    check_dtype("delta", delta, (u.dtype,), "the dtype of u")
    check_ndim("A", A, (2,), "2-D (dim, N)")
    if A.shape[0] != dim:
        raise ValueError(f"A must have shape (dim={dim}, N); got {describe(A)}")
    N = A.shape[1]
    pdt = param_dtypes(u.dtype)
    check_dtype("A", A, pdt, "parameters accumulate in fp32")

    check_ndim("B", B, (3, 4), "(batch, N, L) or grouped (batch, G, N, L)")
    groups = 1 if B.dim() == 3 else B.shape[1]
    expected_bc = (batch, N, L) if B.dim() == 3 else (batch, groups, N, L)
    meaning = "(batch, N, L)" if B.dim() == 3 else "(batch, G, N, L)"
    check_shape("B", B, expected_bc, meaning)
    check_shape("C", C, expected_bc, meaning + ", like B")
    if groups == 0 or dim % groups != 0:
        raise ValueError(
            f"dim={dim} must be divisible by the number of groups G={groups} of B; B: {describe(B)}"
        )
    bc_dtypes = tuple(dict.fromkeys((u.dtype, state_dtype(u.dtype))))
    check_dtype("B", B, bc_dtypes, "the dtype of u, or the fp32 state dtype")
    check_dtype("C", C, bc_dtypes, "the dtype of u, or the fp32 state dtype")

    if D is not None:
        check_shape("D", D, (dim,), "(dim,)")
        check_dtype("D", D, pdt)
    if z is not None:
        check_shape("z", z, (batch, dim, L), "(batch, dim, L), like u")
        check_dtype("z", z, (u.dtype,), "the dtype of u")
    if delta_bias is not None:
        check_shape("delta_bias", delta_bias, (dim,), "(dim,)")
        check_dtype("delta_bias", delta_bias, pdt)
    if initial_state is not None:
        check_shape("initial_state", initial_state, (batch, dim, N), "(batch, dim, N)")
        check_dtype("initial_state", initial_state, (state_dtype(u.dtype),), "the state dtype")

    check_same_device(
        [
            ("u", u),
            ("delta", delta),
            ("A", A),
            ("B", B),
            ("C", C),
            ("D", D),
            ("z", z),
            ("delta_bias", delta_bias),
            ("initial_state", initial_state),
        ]
    )
