"""Parallel inclusive scans for any associative combine over a list of leaves.

A *combine* here takes two lists of tensors (left operand, right operand; equal length, one tensor per
leaf) and returns the list of combined leaves. It must be associative and pointwise along the scan
dim, i.e. it must broadcast over a leading batch of positions, as ``higher_order.associative_scan``'s
``combine_mode="pointwise"`` requires.

All three algorithms keep the head of the sequence by slicing (no identity element is ever built) and
work for any static length. See Note [three parallel scans].

Note [three parallel scans]
~~~~~~~~~~~~~~~~~~~~~~~~~~~
Let x_0..x_{n-1} and y_i = x_0 . x_1 . ... . x_i.

Hillis–Steele: for k = 1, 2, 4, ... < n: y[k:] = y[:n-k] . y[k:], y[:k] unchanged. ceil(log2 n) steps
of O(n) combines each: depth log n, work n log n.

Blelloch (work-efficient, written recursively in the Ladner–Fischer form): combine adjacent pairs
p_k = x_{2k} . x_{2k+1} (k < n//2), scan them recursively to s_k = x_0 . ... . x_{2k+1}, then
y_{2k+1} = s_k, y_0 = x_0, y_{2k} = s_{k-1} . x_{2k}; interleave. Depth 2 log n, work about 2n,
a constant number of graph nodes per level.

Chunked two-level: pad to a multiple of the chunk size c (with zeros: padding sits after every real
position, and an inclusive scan never lets a later position reach an earlier one, so the padding is
sliced off unseen), view as (n/c, c), scan inside chunks (Hillis–Steele), scan the chunk totals
(Hillis–Steele), then fix up chunk j >= 1 with the total of chunks < j. Work n log c + (n/c) log(n/c).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from . import _aten as T

Leaves = list[torch.Tensor]
Combine = Callable[[Leaves, Leaves], Sequence[torch.Tensor]]


def hillis_steele_scan(combine: Combine, xs: Sequence[torch.Tensor], dim: int) -> Leaves:
    """Inclusive scan in ceil(log2 n) combine steps (Note [three parallel scans])."""
    ys = list(xs)
    n = T.length(ys[0], dim)
    k = 1
    while k < n:
        left = [T.narrow(y, dim, 0, n - k) for y in ys]
        right = [T.narrow(y, dim, k, n) for y in ys]
        tails = combine(left, right)
        ys = [T.cat([T.narrow(y, dim, 0, k), t], dim) for y, t in zip(ys, tails, strict=True)]
        k *= 2
    return ys


def blelloch_scan(combine: Combine, xs: Sequence[torch.Tensor], dim: int) -> Leaves:
    """Work-efficient inclusive scan: pairs, recurse, fix up evens (Note [three parallel scans])."""
    xs = list(xs)
    n = T.length(xs[0], dim)
    if n < 2:
        return xs
    m = n // 2  # pairs, = number of odd positions
    ne = n - m  # even positions
    evens = [T.narrow(x, dim, 0, 2 * m, 2) for x in xs]
    odds = [T.narrow(x, dim, 1, 2 * m, 2) for x in xs]
    s = blelloch_scan(combine, list(combine(evens, odds)), dim)
    heads = [T.narrow(x, dim, 0, 1) for x in xs]
    if ne > 1:
        fixed = combine(
            [T.narrow(si, dim, 0, ne - 1) for si in s], [T.narrow(x, dim, 2, n, 2) for x in xs]
        )
        ye = [T.cat([h, f], dim) for h, f in zip(heads, fixed, strict=True)]
    else:
        ye = heads
    return [T.interleave_uneven(e, o, dim) for e, o in zip(ye, s, strict=True)]


def chunked_scan(
    combine: Combine, xs: Sequence[torch.Tensor], dim: int, chunk_size: int = 64
) -> Leaves:
    """Two-level scan: inside chunks, over chunk totals, fix-up (Note [three parallel scans])."""
    xs = list(xs)
    n = T.length(xs[0], dim)
    c = max(1, min(chunk_size, n))
    nc = -(-n // c)
    if nc == 1:
        return hillis_steele_scan(combine, xs, dim)
    padded = nc * c
    if padded != n:
        xs = [T.pad_end(x, dim, padded - n, 0) for x in xs]
    xs = [T.split_dim(x, dim, nc, c) for x in xs]
    inner = hillis_steele_scan(combine, xs, dim + 1)
    totals = [T.narrow(y, dim + 1, c - 1, c) for y in inner]
    carries = hillis_steele_scan(combine, totals, dim)
    prev = [T.narrow(cy, dim, 0, nc - 1) for cy in carries]
    rest = [T.narrow(y, dim, 1, nc) for y in inner]
    fixed = combine(
        [T.expand_as_along(p, r, dim + 1) for p, r in zip(prev, rest, strict=True)], rest
    )
    ys = [T.cat([T.narrow(y, dim, 0, 1), f], dim) for y, f in zip(inner, fixed, strict=True)]
    ys = [T.merge_dims(y, dim) for y in ys]
    if padded != n:
        ys = [T.narrow(y, dim, 0, n) for y in ys]
    return ys
