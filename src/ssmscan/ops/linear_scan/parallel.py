"""Realization 2 of ``linear_scan``: a parallel affine scan in plain aten ops (static length).

For backends that convert only aten ops and run no loops (Torch-TensorRT, ONNX at a fixed length):
:func:`ssmscan.scan.affine_scan` (Hillis–Steele, Blelloch or chunked) along ``dim``; no
higher-order op and no constant factory, so the trace holds only slice, cat, reshape, flip, cast
and pointwise ops. The length must be static; for a dynamic length use
:mod:`ssmscan.ops.linear_scan.loop`. Arithmetic in float32 (float64 for float64 inputs), the
result in ``b``'s dtype, fresh and contiguous, as ``ssmscan::linear_scan_fwd`` returns it.
"""

from __future__ import annotations

import torch

from ssmscan.scan import Algorithm, affine_scan

__all__ = ["linear_scan_parallel"]


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def linear_scan_parallel(
    a: torch.Tensor,
    b: torch.Tensor,
    dim: int = -1,
    reverse: bool = False,
    initial: torch.Tensor | None = None,
    algorithm: Algorithm = "auto",
) -> torch.Tensor:
    """h_t = a_t * h_{t-1} + b_t along ``dim`` as a parallel scan (forward only, static length).

    Same semantics as :func:`ssmscan.linear_scan` and
    :func:`ssmscan.ops.linear_scan.reference.linear_scan_reference`.

    Args:
        a: decay, same shape and dtype as ``b``.
        b: input, any shape with a static size along ``dim``; float32/float16/bfloat16/float64.
        dim: the time dimension.
        reverse: run from the last step to the first (h_t = a_t h_{t+1} + b_t).
        initial: ``b``'s shape without ``dim``, dtype of ``b``; zero when None.
        algorithm: "auto", "hillis_steele", "blelloch" or "chunked".

    Returns:
        h, a new contiguous tensor with ``b``'s shape and dtype.

    Example:
        >>> import torch
        >>> linear_scan_parallel(torch.full((1, 3), 0.5), torch.ones(1, 3))
        tensor([[1.0000, 1.5000, 1.7500]])
    """
    dim = dim % b.dim()
    L = b.shape[dim]
    if not isinstance(L, int):
        raise ValueError(
            "linear_scan_parallel needs a static length; use the loop realization "
            "(ssmscan.ops.linear_scan.loop.linear_scan_loop) for a dynamic length"
        )
    if L == 0:
        return b.clone(memory_format=torch.contiguous_format)
    cdt = _compute_dtype(b.dtype)
    h0 = initial.to(cdt) if initial is not None else None
    h = affine_scan(a.to(cdt), b.to(cdt), dim, reverse, h0, algorithm)
    return h.to(b.dtype).contiguous()
