"""Parallel scans specialised to the affine combine (a_l, b_l) . (a_r, b_r) = (a_l a_r, a_r b_l + b_r).

The affine prefix (A_i, B_i) of (a, b) gives h_i = A_i h_{-1} + B_i for h_i = a_i h_{i-1} + b_i; with
h_{-1} = 0 the state is B. Compared with feeding the affine combine to the generic scans, these skip
work the affine structure does not need (Note [affine shortcuts]).

Note [affine shortcuts]
~~~~~~~~~~~~~~~~~~~~~~~
1. ``a`` may be broadcast against ``b`` (e.g. a decay shared over channels): the product prefix A is
   computed at a's own, smaller shape and is only broadcast inside ``a_r * b_l``.
2. When the caller does not need A (the usual case: only the state is used), the A half of the
   combine is dropped wherever A is not an input to a later B: the last Hillis–Steele step, all even
   fix-ups and the top level of Blelloch, and the chunk fix-up of the two-level scan.
3. The chunk fix-up needs only the carried state: B = A_inner * h_prev + B_inner.
"""

from __future__ import annotations

import torch

from . import _aten as T

AffinePair = tuple[torch.Tensor | None, torch.Tensor]


def hillis_steele_affine(a: torch.Tensor, b: torch.Tensor, dim: int, need_a: bool) -> AffinePair:
    """Affine Hillis–Steele; A is returned only if ``need_a`` (else None)."""
    n = T.length(b, dim)
    k = 1
    while k < n:
        ar, al = T.narrow(a, dim, k, n), T.narrow(a, dim, 0, n - k)
        b = T.cat(
            [T.narrow(b, dim, 0, k), ar * T.narrow(b, dim, 0, n - k) + T.narrow(b, dim, k, n)], dim
        )
        if 2 * k < n or need_a:
            a = T.cat([T.narrow(a, dim, 0, k), al * ar], dim)
        k *= 2
    return (a if need_a else None), b


def blelloch_affine(a: torch.Tensor, b: torch.Tensor, dim: int, need_a: bool) -> AffinePair:
    """Affine work-efficient scan (the recursion of Note [three parallel scans])."""
    n = T.length(b, dim)
    if n < 2:
        return (a if need_a else None), b
    m = n // 2
    ne = n - m
    ae, ao = T.narrow(a, dim, 0, 2 * m, 2), T.narrow(a, dim, 1, 2 * m, 2)
    be, bo = T.narrow(b, dim, 0, 2 * m, 2), T.narrow(b, dim, 1, 2 * m, 2)
    sa, sb = blelloch_affine(ae * ao, ao * be + bo, dim, need_a)
    heads_a, heads_b = T.narrow(a, dim, 0, 1), T.narrow(b, dim, 0, 1)
    ya, yb = heads_a, heads_b
    if ne > 1:  # y_{2k} = s_{k-1} . x_{2k}
        a2, b2 = T.narrow(a, dim, 2, n, 2), T.narrow(b, dim, 2, n, 2)
        yb = T.cat([heads_b, a2 * T.narrow(sb, dim, 0, ne - 1) + b2], dim)
        if need_a:
            assert sa is not None
            ya = T.cat([heads_a, T.narrow(sa, dim, 0, ne - 1) * a2], dim)
    b_out = T.interleave_uneven(yb, sb, dim)
    if not need_a:
        return None, b_out
    assert sa is not None
    return T.interleave_uneven(ya, sa, dim), b_out


def chunked_affine(
    a: torch.Tensor, b: torch.Tensor, dim: int, need_a: bool, chunk_size: int = 64
) -> AffinePair:
    """Affine two-level scan; the chunk fix-up uses only the carried state (Note [affine shortcuts])."""
    n = T.length(b, dim)
    c = max(1, min(chunk_size, n))
    nc = -(-n // c)
    if nc == 1:
        return hillis_steele_affine(a, b, dim, need_a)
    padded = nc * c
    if padded != n:
        a = T.pad_end(a, dim, padded - n, 0)
        b = T.pad_end(b, dim, padded - n, 0)
    a = T.split_dim(a, dim, nc, c)
    b = T.split_dim(b, dim, nc, c)
    ia, ib = hillis_steele_affine(a, b, dim + 1, need_a=True)
    assert ia is not None
    ta, tb = T.narrow(ia, dim + 1, c - 1, c), T.narrow(ib, dim + 1, c - 1, c)
    ca, cb = hillis_steele_affine(ta, tb, dim, need_a)
    rest_a, rest_b = T.narrow(ia, dim, 1, nc), T.narrow(ib, dim, 1, nc)
    fb = rest_a * T.narrow(cb, dim, 0, nc - 1) + rest_b
    yb = T.merge_dims(T.cat([T.narrow(ib, dim, 0, 1), fb], dim), dim)
    ya = None
    if need_a:
        assert ca is not None
        fa = rest_a * T.narrow(ca, dim, 0, nc - 1)
        ya = T.merge_dims(T.cat([T.narrow(ia, dim, 0, 1), fa], dim), dim)
    if padded != n:
        yb = T.narrow(yb, dim, 0, n)
        ya = T.narrow(ya, dim, 0, n) if ya is not None else None
    return ya, yb
