"""Worst relative error of the CPU kernel against the float64 reference over the test grid, per
input dtype: the measurement behind ``ssmscan.testing.tolerances``.

    python benchmarks/selective_scan/derive_tolerances.py
"""

from __future__ import annotations

import itertools

import torch

import ssmscan
from ssmscan.testing import make_selective_scan_inputs, rel_error

TENSOR_ARGS = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias", "initial_state")


def worst_error(dtype: torch.dtype) -> tuple[float, str]:
    worst, where = 0.0, ""
    for L, N, groups, flags in itertools.product((1, 2, 63, 1000), (1, 16), (None, 2), range(4)):
        on = [bool(flags & 1), bool(flags & 2)]
        kw = make_selective_scan_inputs(
            2,
            4,
            L,
            N,
            groups=groups,
            dtype=dtype,
            has_D=on[0],
            has_z=on[0],
            has_delta_bias=on[1],
            delta_softplus=on[1],
            has_initial_state=on[0],
            seed=L + N,
            requires_grad=True,
        )
        ref_in = {
            k: v.detach().double().requires_grad_() if isinstance(v, torch.Tensor) else v
            for k, v in kw.items()
        }
        out, last = ssmscan.selective_scan(**kw, return_last_state=True)
        rout, rlast = ssmscan.selective_scan_reference(**ref_in, return_last_state=True)
        names = [k for k in TENSOR_ARGS if isinstance(kw[k], torch.Tensor)]
        g = torch.Generator().manual_seed(0)
        do = torch.randn(out.shape, generator=g, dtype=torch.float64).to(out.dtype).double()
        grads = torch.autograd.grad(
            (out * do.to(out.dtype)).sum() + last.sum(), [kw[k] for k in names]
        )
        rgrads = torch.autograd.grad((rout * do).sum() + rlast.sum(), [ref_in[k] for k in names])
        pairs = [("out", out, rout), ("last", last, rlast)] + [
            (f"d{k}", a, b) for k, a, b in zip(names, grads, rgrads)
        ]
        for name, a, b in pairs:
            e = rel_error(a, b)
            if e > worst:
                worst, where = e, f"L{L} N{N} G{groups} flags{flags} {name}"
    return worst, where


if __name__ == "__main__":
    for dt in (torch.float64, torch.float32, torch.bfloat16, torch.float16):
        err, where = worst_error(dt)
        print(f"{dt!s:16s} worst {err:.2e}  at {where}")
