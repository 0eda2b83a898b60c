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


def complex_param_dtypes(u_dtype: torch.dtype) -> tuple[torch.dtype, ...]:
    """Dtypes accepted for a complex A and a time-invariant complex B / C: complex64, or
    complex128 as well for float64 inputs."""
    if u_dtype == torch.float64:
        return (torch.complex64, torch.complex128)
    return (torch.complex64,)


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
    mamba_forms: bool = False,
) -> None:
    """Raise ``TypeError``/``ValueError`` naming the first bad argument.

    With ``mamba_forms`` the checks also accept mamba-ssm's other argument forms (those
    ``ssmscan.selective_scan`` rewrites, :mod:`ssmscan.ops.selective_scan.forms`): time-invariant
    (dim, N) B / C, and complex A with complex B / C."""
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
    is_complex = mamba_forms and A.is_complex()
    if is_complex:
        check_dtype("A", A, complex_param_dtypes(u.dtype), "a complex A's parts are fp32")
    else:
        check_dtype("A", A, pdt, "parameters accumulate in fp32")

    variable = [X for X in (B, C) if not (mamba_forms and X.dim() == 2)]
    groups = 1
    if variable:
        first = variable[0]
        first_name = "B" if first is B else "C"
        check_ndim(
            first_name, first, (2, 3, 4) if mamba_forms else (3, 4), _bc_meaning(mamba_forms)
        )
        groups = 1 if first.dim() == 3 else first.shape[1]
        steps = 2 * L if is_complex else L
        expected_bc = (batch, N, steps) if first.dim() == 3 else (batch, groups, N, steps)
        meaning = "(batch, N, L)" if first.dim() == 3 else "(batch, G, N, L)"
        if is_complex:
            meaning = meaning.replace("L)", "2L) (complex A: real, imaginary parts interleaved)")
        for name, X in (("B", B), ("C", C)):
            if any(X is v for v in variable):
                like = "" if X is first else f", like {first_name}"
                check_shape(name, X, expected_bc, meaning + like)
        if groups == 0 or dim % groups != 0:
            raise ValueError(
                f"dim={dim} must be divisible by the number of groups G={groups} of "
                f"{first_name}; {first_name}: {describe(first)}"
            )
    bc_dtypes = tuple(dict.fromkeys((u.dtype, state_dtype(u.dtype))))
    for name, X in (("B", B), ("C", C)):
        if any(X is v for v in variable):
            check_dtype(name, X, bc_dtypes, "the dtype of u, or the fp32 state dtype")
        else:  # time-invariant (mamba_forms only)
            check_shape(name, X, (dim, N), "(dim, N), time-invariant, like A")
            if is_complex:
                check_dtype(name, X, complex_param_dtypes(u.dtype), "complex, as A is complex")
            else:
                check_dtype(name, X, pdt, "real like A (a complex one needs a complex A)")

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
        sdt = state_dtype(u.dtype)
        if is_complex:
            cdt = torch.complex128 if sdt == torch.float64 else torch.complex64
            check_dtype("initial_state", initial_state, (cdt,), "the complex state dtype")
        else:
            check_dtype("initial_state", initial_state, (sdt,), "the state dtype")

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


def _bc_meaning(mamba_forms: bool) -> str:
    if mamba_forms:
        return "(batch, N, L), grouped (batch, G, N, L) or time-invariant (dim, N)"
    return "(batch, N, L) or grouped (batch, G, N, L)"


def check_canonical_forms(
    realization: str, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor
) -> None:
    """Raise ``ValueError`` when ``A``, ``B``, ``C`` are in a form only ``ssmscan.selective_scan``
    accepts (complex A, time-invariant (dim, N) B / C): the op and its realizations take real A
    and time-varying B / C; ``ssmscan.selective_scan`` rewrites the other forms into those
    (:mod:`ssmscan.ops.selective_scan.forms`). Checks only dimensions and dtypes (no shape
    guards under tracing)."""
    hint = "; call ssmscan.selective_scan, which rewrites it into the op's form"
    if A.is_complex():
        raise ValueError(f"{realization} takes a real A; got a complex A: {describe(A)}{hint}")
    for name, X in (("B", B), ("C", C)):
        if X.dim() not in (3, 4):
            raise ValueError(
                f"{realization} takes {name} as (batch, N, L) or (batch, G, N, L); got "
                f"{describe(X)} (a time-invariant (dim, N) {name}?){hint}"
            )
        if X.is_complex():
            raise ValueError(f"{realization} takes a real {name}; got {describe(X)}{hint}")
