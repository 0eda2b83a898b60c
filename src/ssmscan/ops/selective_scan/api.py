"""``ssmscan.selective_scan``: the public entry point over the op's realizations."""

from __future__ import annotations

import functools
from typing import Literal

import torch

from ssmscan.ops.selective_scan import eager, forms
from ssmscan.ops.selective_scan import op as _op  # noqa: F401  (registers the ops)
from ssmscan.ops.selective_scan.checks import check_selective_scan_args
from ssmscan.ops.selective_scan.reference import selective_scan_reference

Impl = Literal["auto", "cpu", "triton", "reference"]
_DEVICE_OF_IMPL = {"cpu": "cpu", "triton": "cuda"}


def selective_scan(
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
    impl: Impl = "auto",
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Selective scan (Mamba-1), a drop-in for mamba-ssm's ``selective_scan_fn``.

    For batch b, channel d, state n, time t::

        dt_t  = softplus(delta_t + delta_bias)        (bias and softplus optional)
        h_t   = exp(dt_t * A[d, n]) * h_{t-1} + dt_t * B_t[n] * u_t
        y_t   = sum_n C_t[n] * h_t[n] + D[d] * u_t
        out_t = y_t * silu(z_t)                        (z optional)

    Differentiable in every tensor argument; works under ``torch.compile(fullgraph=True)`` and
    ``torch.export`` (one ``ssmscan::selective_scan_fwd`` node).

    Args:
        u: (batch, dim, L), float32, float16, bfloat16 or float64.
        delta: (batch, dim, L), dtype of ``u``.
        A: (dim, N), float32 (float64 allowed for float64 ``u``), or complex64 (complex128) for
            an S4D-style complex scan: the state is complex and ``y_t = 2 * Re(sum_n C_t[n] *
            h_t[n])``, as in mamba-ssm (Note [complex A] in
            :mod:`ssmscan.ops.selective_scan.forms`).
        B, C: each (batch, N, L) or grouped (batch, G, N, L) with ``dim`` divisible by G, dtype of
            ``u`` or float32; or time-invariant (dim, N), dtype like ``A``. With complex A, a
            variable B / C is real (batch, N, 2L) or (batch, G, N, 2L) holding step t's real and
            imaginary parts at 2t and 2t + 1 (mamba-ssm's layout). Time-invariant and complex
            forms run per channel (B / C copied as (batch, dim, N, L); 2N real states for
            complex A); see :mod:`ssmscan.ops.selective_scan.forms` for the cost.
        D: optional (dim,) skip weight, dtype like ``A``.
        z: optional (batch, dim, L) gate, dtype of ``u``.
        delta_bias: optional (dim,), added to ``delta`` before the softplus, dtype like ``A``.
        delta_softplus: apply softplus (threshold 20) to ``delta + delta_bias``.
        return_last_state: also return the state after the last step.
        initial_state: optional (batch, dim, N) state before the first step, in the state dtype
            (float32; float64 for float64 ``u``; complex64 / complex128 for complex A). Zero when
            None.
        impl: ``"auto"`` (the kernel for the tensors' device), ``"cpu"`` (C kernel), ``"triton"``
            (CUDA Triton kernels) or ``"reference"`` (the sequential oracle, slow).

    Returns:
        ``out`` (batch, dim, L) in ``u``'s dtype; with ``return_last_state``, ``(out, last_state)``
        where ``last_state`` is (batch, dim, N) in the state dtype (complex for complex A).
        Accumulation is float32 (float64 for float64 inputs).

    Example:
        >>> import torch, ssmscan
        >>> u, delta = torch.randn(2, 8, 33), torch.rand(2, 8, 33)
        >>> A = -torch.rand(8, 4)
        >>> B, C = torch.randn(2, 4, 33), torch.randn(2, 4, 33)
        >>> out, last = ssmscan.selective_scan(u, delta, A, B, C, return_last_state=True)
        >>> out.shape, last.shape
        (torch.Size([2, 8, 33]), torch.Size([2, 8, 4]))

        S4D-style, with a complex A, a time-invariant B and a variable C (mamba-ssm's forms):

        >>> A = torch.complex(-0.5 * torch.ones(8, 4), torch.pi * torch.arange(4.0).expand(8, 4))
        >>> B = torch.randn(8, 4, dtype=torch.complex64)
        >>> C = torch.randn(2, 4, 2 * 33)  # (real, imaginary) of each step
        >>> out, last = ssmscan.selective_scan(u, delta, A, B, C, return_last_state=True)
        >>> out.dtype, last.dtype
        (torch.float32, torch.complex64)
    """
    check_selective_scan_args(u, delta, A, B, C, D, z, delta_bias, initial_state, mamba_forms=True)
    if impl == "reference":
        return selective_scan_reference(
            u, delta, A, B, C, D, z, delta_bias, delta_softplus, return_last_state, initial_state
        )
    if impl != "auto":
        if impl not in _DEVICE_OF_IMPL:
            raise ValueError(
                f"impl must be one of 'auto', 'cpu', 'triton', 'reference'; got {impl!r}"
            )
        if u.device.type != _DEVICE_OF_IMPL[impl]:
            raise ValueError(
                f"impl={impl!r} runs on {_DEVICE_OF_IMPL[impl]} tensors; got u on {u.device}"
            )

    if forms.is_op_form(A, B, C):
        out, last = _run_op(
            impl, u, delta, A, B, C, D, z, delta_bias, initial_state, delta_softplus
        )
    else:
        out, last = forms.selective_scan_forms(
            u, delta, A, B, C, D, z, delta_bias, delta_softplus, initial_state,
            functools.partial(_run_op, impl),
        )  # fmt: skip
    return (out, last) if return_last_state else out


def _run_op(
    impl: Impl,
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    delta_bias: torch.Tensor | None,
    initial_state: torch.Tensor | None,
    delta_softplus: bool,
    *,
    eager_fast_path: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, last_state) of the op, or of its eager CUDA fast path where that applies (Note
    [eager CUDA fast path]; ``eager_fast_path=False``: always the op), on arguments in the op's
    form (real A, time-varying B / C)."""
    tensors = (u, delta, A, B, C, D, z, delta_bias, initial_state)
    if eager_fast_path and impl != "cpu" and eager.fast_path_ok(tensors, delta_softplus):
        return eager.selective_scan(*tensors, delta_softplus)
    out, last, _ = torch.ops.ssmscan.selective_scan_fwd(*tensors, delta_softplus)
    return out, last
