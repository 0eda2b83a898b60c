"""The few tensor primitives the parallel scans are built from.

Every helper calls one aten op that Torch-TensorRT converts and the ONNX exporter translates (slice,
cat, unsqueeze, view, reshape, expand, constant_pad_nd, flip). No constant factory (`ones_like`,
`zeros_like`, `full_like`, `new_*`, `empty_like`) is ever used: identities are never materialised,
the head of a sequence is kept by slicing instead.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

aten = torch.ops.aten


def length(x: torch.Tensor, dim: int) -> int:
    """Size of ``x`` along ``dim`` (an int, or a SymInt under symbolic tracing)."""
    return x.shape[dim]


def narrow(x: torch.Tensor, dim: int, start: int, end: int, step: int = 1) -> torch.Tensor:
    """``x[start:end:step]`` along ``dim`` as one ``aten.slice``."""
    return aten.slice.Tensor(x, dim, start, end, step)


def cat(xs: Sequence[torch.Tensor], dim: int) -> torch.Tensor:
    return aten.cat.default(list(xs), dim)


def pad_end(x: torch.Tensor, dim: int, amount: int, value: float) -> torch.Tensor:
    """Append ``amount`` elements equal to ``value`` along ``dim`` (``aten.constant_pad_nd``)."""
    pad = [0, 0] * (x.dim() - 1 - dim) + [0, amount]
    return aten.constant_pad_nd.default(x, pad, value)


def flip(x: torch.Tensor, dim: int) -> torch.Tensor:
    return aten.flip.default(x, [dim])


def interleave(even: torch.Tensor, odd: torch.Tensor, dim: int) -> torch.Tensor:
    """``[e0, o0, e1, o1, ...]`` along ``dim`` from two tensors of the same shape."""
    both = cat(
        [aten.unsqueeze.default(even, dim + 1), aten.unsqueeze.default(odd, dim + 1)], dim + 1
    )
    shape = list(both.shape)
    merged = [*shape[:dim], shape[dim] * 2, *shape[dim + 2 :]]
    return aten.view.default(both, merged)  # `both` is a fresh cat output, hence contiguous


def interleave_uneven(even: torch.Tensor, odd: torch.Tensor, dim: int) -> torch.Tensor:
    """Interleave when ``even`` has as many or one more elements along ``dim`` than ``odd``."""
    ne, no = length(even, dim), length(odd, dim)
    if ne == no:
        return interleave(even, odd, dim)
    both = interleave(narrow(even, dim, 0, no), odd, dim)
    return cat([both, narrow(even, dim, no, ne)], dim)


def split_dim(x: torch.Tensor, dim: int, outer: int, inner: int) -> torch.Tensor:
    """Reshape the ``dim`` axis of ``x`` (of size ``outer * inner``) into ``(outer, inner)``."""
    shape = list(x.shape)
    return aten.reshape.default(x, [*shape[:dim], outer, inner, *shape[dim + 1 :]])


def merge_dims(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Inverse of :func:`split_dim`: merge axes ``dim`` and ``dim + 1``."""
    shape = list(x.shape)
    return aten.reshape.default(x, [*shape[:dim], shape[dim] * shape[dim + 1], *shape[dim + 2 :]])


def expand_as_along(x: torch.Tensor, target: torch.Tensor, dim: int) -> torch.Tensor:
    """Broadcast the size-1 axis ``dim`` of ``x`` to ``target``'s size along ``dim``."""
    shape = list(x.shape)
    shape[dim] = target.shape[dim]
    return aten.expand.default(x, shape)
