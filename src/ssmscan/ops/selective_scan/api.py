"""``ssmscan.selective_scan``: the public entry point over the op's realizations."""

from __future__ import annotations

from typing import Literal

import torch

from ssmscan.ops.selective_scan import eager
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
        A: (dim, N), float32 (float64 allowed for float64 ``u``).
        B, C: (batch, N, L) or grouped (batch, G, N, L) with ``dim`` divisible by G; dtype of ``u``
            or float32.
        D: optional (dim,) skip weight, dtype like ``A``.
        z: optional (batch, dim, L) gate, dtype of ``u``.
        delta_bias: optional (dim,), added to ``delta`` before the softplus, dtype like ``A``.
        delta_softplus: apply softplus (threshold 20) to ``delta + delta_bias``.
        return_last_state: also return the state after the last step.
        initial_state: optional (batch, dim, N) state before the first step, in the state dtype
            (float32; float64 for float64 ``u``). Zero when None.
        impl: ``"auto"`` (the kernel for the tensors' device), ``"cpu"`` (C kernel), ``"triton"``
            (CUDA Triton kernels) or ``"reference"`` (the sequential oracle, slow).

    Returns:
        ``out`` (batch, dim, L) in ``u``'s dtype; with ``return_last_state``, ``(out, last_state)``
        where ``last_state`` is (batch, dim, N) in the state dtype. Accumulation is float32
        (float64 for float64 inputs).

    Example:
        >>> import torch, ssmscan
        >>> u, delta = torch.randn(2, 8, 33), torch.rand(2, 8, 33)
        >>> A = -torch.rand(8, 4)
        >>> B, C = torch.randn(2, 4, 33), torch.randn(2, 4, 33)
        >>> out, last = ssmscan.selective_scan(u, delta, A, B, C, return_last_state=True)
        >>> out.shape, last.shape
        (torch.Size([2, 8, 33]), torch.Size([2, 8, 4]))
    """
    check_selective_scan_args(u, delta, A, B, C, D, z, delta_bias, initial_state)
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
    tensors = (u, delta, A, B, C, D, z, delta_bias, initial_state)
    if impl != "cpu" and eager.fast_path_ok(tensors, delta_softplus):  # Note [eager CUDA fast path]
        out, last = eager.selective_scan(*tensors, delta_softplus)
        return (out, last) if return_last_state else out
    out, last, _ = torch.ops.ssmscan.selective_scan_fwd(
        u, delta, A, B, C, D, z, delta_bias, initial_state, delta_softplus
    )
    return (out, last) if return_last_state else out
