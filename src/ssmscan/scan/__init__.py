"""Parallel scans in plain aten ops: Hillis–Steele, Blelloch, chunked two-level, affine specialisations.

Everything here is a static-length, loop-free composition of slice / cat / pointwise / reshape / pad /
flip ops, so it traces into graphs that Torch-TensorRT converts and ONNX exports, and runs eagerly on
any device. The head of each sequence is kept by slicing: no identity element, no constant factory.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import torch
import torch.utils._pytree as pytree

from . import _aten as T
from .affine import blelloch_affine, chunked_affine, hillis_steele_affine
from .generic import blelloch_scan, chunked_scan, hillis_steele_scan

__all__ = [
    "ALGORITHMS",
    "DEFAULT_CHUNK_SIZE",
    "Algorithm",
    "affine_scan",
    "associative_scan",
    "blelloch_scan",
    "choose_algorithm",
    "chunked_scan",
    "hillis_steele_scan",
]

Algorithm = Literal["auto", "hillis_steele", "blelloch", "chunked"]
ALGORITHMS: tuple[str, ...] = ("hillis_steele", "blelloch", "chunked")
DEFAULT_CHUNK_SIZE = 64
# Below this length every algorithm is a handful of steps; Hillis–Steele has the shortest graph.
_AUTO_SHORT = 128


def choose_algorithm(length: int, algorithm: Algorithm = "auto") -> str:
    """The algorithm ``algorithm="auto"`` resolves to for a scan of ``length`` steps.

    Chosen from the measurements in ``benchmarks/RESULTS.md`` (section "Parallel scans and lowering"):
    Hillis–Steele for short scans (shortest graph), Blelloch otherwise (fastest in CPU eager, within
    1.5x of the best in ONNX Runtime; it also computes the fewest products, which avoids denormal
    slow-downs as decays underflow).
    """
    if algorithm != "auto":
        if algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm must be 'auto' or one of {ALGORITHMS}, got {algorithm!r}")
        return algorithm
    return "hillis_steele" if length <= _AUTO_SHORT else "blelloch"


def _normalize_dim(dim: int, ndim: int) -> int:
    if not -ndim <= dim < ndim:
        raise IndexError(f"scan dim {dim} out of range for a {ndim}-d tensor")
    return dim % ndim


def associative_scan(
    combine_fn: Callable[[Any, Any], Any],
    xs: Any,
    dim: int = 0,
    reverse: bool = False,
    algorithm: Algorithm = "auto",
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> Any:
    """Inclusive scan of a pytree of tensors with an associative, pointwise ``combine_fn``.

    Same contract as ``torch._higher_order_ops.associative_scan`` with ``combine_mode="pointwise"``:
    ``combine_fn(left, right)`` gets two pytrees shaped like ``xs`` and returns one; ``reverse`` scans
    from the end (flip, scan with the same combine, flip back, as torch does).

    Args:
        combine_fn: associative function of two pytrees of tensors, pointwise over the scan dim.
        xs: pytree of tensors, all the same (static) size along ``dim``; any dtype.
        dim: scan dimension (negative allowed).
        reverse: scan from the last element to the first.
        algorithm: "hillis_steele", "blelloch", "chunked" or "auto" (see :func:`choose_algorithm`).
        chunk_size: chunk length of the two-level scan.

    Returns:
        A pytree like ``xs`` with the inclusive prefixes, dtypes preserved.

    Example:
        >>> x = torch.arange(1.0, 6.0)
        >>> associative_scan(lambda l, r: l + r, x, dim=0)
        tensor([ 1.,  3.,  6., 10., 15.])
    """
    leaves, spec = pytree.tree_flatten(xs)
    if not leaves:
        raise ValueError("associative_scan needs at least one tensor")
    dim = _normalize_dim(dim, leaves[0].dim())

    def combine(left: list[torch.Tensor], right: list[torch.Tensor]) -> list[torch.Tensor]:
        out = combine_fn(pytree.tree_unflatten(left, spec), pytree.tree_unflatten(right, spec))
        return pytree.tree_leaves(out)

    ys = scan_leaves(combine, leaves, dim, reverse, algorithm, chunk_size)
    return pytree.tree_unflatten(ys, spec)


def scan_leaves(
    combine: Callable[[list[torch.Tensor], list[torch.Tensor]], list[torch.Tensor]],
    leaves: list[torch.Tensor],
    dim: int,
    reverse: bool = False,
    algorithm: Algorithm = "auto",
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> list[torch.Tensor]:
    """:func:`associative_scan` on a flat list of leaves with a list-to-list ``combine``."""
    n = T.length(leaves[0], dim)
    if not isinstance(n, int):
        raise ValueError("parallel scans need a static length along the scan dim")
    algo = choose_algorithm(n, algorithm)
    if reverse:
        leaves = [T.flip(x, dim) for x in leaves]
    if algo == "hillis_steele":
        ys = hillis_steele_scan(combine, leaves, dim)
    elif algo == "blelloch":
        ys = blelloch_scan(combine, leaves, dim)
    else:
        ys = chunked_scan(combine, leaves, dim, chunk_size)
    if reverse:
        ys = [T.flip(y, dim) for y in ys]
    return ys


def affine_scan(
    a: torch.Tensor,
    b: torch.Tensor,
    dim: int = 0,
    reverse: bool = False,
    initial: torch.Tensor | None = None,
    algorithm: Algorithm = "auto",
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    return_a: bool = False,
) -> Any:
    """Solve h_t = a_t * h_{t-1} + b_t along ``dim`` in parallel (h_{-1} = ``initial`` or 0).

    With ``reverse=True`` the recurrence runs from the end: h_t = a_t * h_{t+1} + b_t.

    Args:
        a: decay, broadcastable to ``b`` in every dim but ``dim``, same size along ``dim``.
        b: input, shape ``(..., L, ...)``; any floating dtype (kept).
        dim: time dimension.
        reverse: run the recurrence backwards in time.
        initial: optional state before the first step, ``b``'s shape without ``dim``.
        algorithm: as in :func:`associative_scan`.
        chunk_size: chunk length of the two-level scan.
        return_a: also return the running products A_t (the affine prefix's first half).

    Returns:
        ``h`` shaped like ``b`` (the broadcast of ``a`` and ``b``); ``(A, h)`` if ``return_a``.

    Example:
        >>> a = torch.full((4,), 0.5)
        >>> affine_scan(a, torch.ones(4))
        tensor([1.0000, 1.5000, 1.7500, 1.8750])
    """
    ndim = b.dim()
    dim = _normalize_dim(dim, ndim)
    if a.dim() != ndim:
        raise ValueError(f"a and b need the same number of dims, got {a.dim()} and {ndim}")
    n = T.length(b, dim)
    if not isinstance(n, int):
        raise ValueError("parallel scans need a static length along the scan dim")
    if T.length(a, dim) != n:
        raise ValueError("a and b need the same size along the scan dim")
    algo = choose_algorithm(n, algorithm)
    if reverse:
        a, b = T.flip(a, dim), T.flip(b, dim)
    if initial is not None:  # fold the initial state into the first input: b_0 += a_0 * h_{-1}
        h0 = torch.ops.aten.unsqueeze.default(initial, dim)
        first = T.narrow(a, dim, 0, 1) * h0 + T.narrow(b, dim, 0, 1)
        b = T.cat([first, T.narrow(b, dim, 1, n)], dim) if n > 1 else first
    if algo == "hillis_steele":
        ya, yb = hillis_steele_affine(a, b, dim, return_a)
    elif algo == "blelloch":
        ya, yb = blelloch_affine(a, b, dim, return_a)
    else:
        ya, yb = chunked_affine(a, b, dim, return_a, chunk_size)
    if reverse:
        yb = T.flip(yb, dim)
        ya = T.flip(ya, dim) if ya is not None else None
    return (ya, yb) if return_a else yb
