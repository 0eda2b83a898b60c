"""``ssmscan.linear_scan``: the general first-order affine recurrence."""

from __future__ import annotations

import torch

from ssmscan.ops.common.checks import (
    FLOAT_DTYPES,
    check_dtype,
    check_same_device,
    check_shape,
    check_tensor,
    describe,
)
from ssmscan.ops.linear_scan import op as _op  # noqa: F401  (registers the ops)


def linear_scan(
    a: torch.Tensor,
    b: torch.Tensor,
    dim: int = -1,
    reverse: bool = False,
    initial: torch.Tensor | None = None,
) -> torch.Tensor:
    """h_t = a_t * h_{t-1} + b_t along ``dim``, with h_{-1} = ``initial`` (zero when None).

    The recurrence of LRU, minGRU, RG-LRU and diagonal linear RNNs. Differentiable in ``a``, ``b``
    and ``initial``; one ``ssmscan::linear_scan_fwd`` node under ``torch.compile``/``torch.export``.

    Args:
        a: decay, any shape, float32/float16/bfloat16/float64.
        b: input, same shape and dtype as ``a`` (nothing is broadcast).
        dim: the time dimension.
        reverse: run from the last step to the first (h_t = a_t h_{t+1} + b_t).
        initial: ``a``'s shape without ``dim``, dtype of ``b``.

    Returns:
        h, a new contiguous tensor with ``b``'s shape and dtype (accumulated in float32, or
        float64 for float64 inputs).

    Example:
        >>> import torch, ssmscan
        >>> ssmscan.linear_scan(torch.full((1, 3), 0.5), torch.ones(1, 3))
        tensor([[1.0000, 1.5000, 1.7500]])
    """
    check_tensor("a", a)
    check_tensor("b", b)
    check_dtype("b", b, FLOAT_DTYPES)
    check_shape("a", a, tuple(b.shape), "(the shape of b; nothing is broadcast)")
    check_dtype("a", a, (b.dtype,), "the dtype of b")
    if b.dim() == 0:
        raise ValueError(
            f"b must have at least one dimension (the time dimension); got {describe(b)}"
        )
    if not -b.dim() <= dim < b.dim():
        raise ValueError(
            f"dim={dim} is out of range for b with {b.dim()} dimensions ({describe(b)})"
        )
    dim = dim % b.dim()
    if initial is not None:
        check_tensor("initial", initial)
        expected = tuple(s for i, s in enumerate(b.shape) if i != dim)
        check_shape("initial", initial, expected, f"(b's shape without dim {dim})")
        check_dtype("initial", initial, (b.dtype,), "the dtype of b")
    check_same_device([("b", b), ("a", a), ("initial", initial)])
    return torch.ops.ssmscan.linear_scan_fwd(a, b, initial, dim, reverse)
