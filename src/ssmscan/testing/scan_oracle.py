"""Float64 sequential scans over any combine: the oracle for the parallel scans and the lowering
passes (used by tests/scan and tests/passes)."""

from __future__ import annotations

import torch


def sequential_scan(combine, leaves, dim, reverse=False):
    """y_0 = x_0, y_i = combine(y_{i-1}, x_i) in float64; reverse = flip, scan, flip (as torch)."""
    xs = [x.double() for x in leaves]
    if reverse:
        xs = [x.flip(dim) for x in xs]
    n = xs[0].shape[dim]
    out = [[x.select(dim, 0)] for x in xs]
    for i in range(1, n):
        ys = combine([o[-1] for o in out], [x.select(dim, i) for x in xs])
        for o, y in zip(out, ys, strict=True):
            o.append(y)
    res = [torch.stack(o, dim) for o in out]
    return [r.flip(dim) for r in res] if reverse else res


def affine(lhs, rhs):
    return [lhs[0] * rhs[0], rhs[0] * lhs[1] + rhs[1]]
