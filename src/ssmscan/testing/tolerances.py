"""The one tolerance table, keyed by the dtype of the inputs.

The measure is ``max|x - ref| / max|ref|`` against the float64 reference run on the same
(rounded) inputs. How the numbers were set: the op test grid (L up to 1000, N up to 16, every
optional input, realistic Mamba inputs) was run against the float64 reference with
``benchmarks/selective_scan/derive_tolerances.py`` and the worst error of any output, final state
or gradient recorded, on 2026-11-29 (CPU kernel, torch 2.13, AMD EPYC):

    float64  4.3e-15    float32  1.2e-06    bfloat16  3.7e-03   float16  4.7e-04

Each tolerance sits about 4-8x above that worst case (bf16/fp16: about two roundings of the
dtype). Never loosen an entry to make a test pass: find out why the error grew.
"""

from __future__ import annotations

import torch

TOLERANCES: dict[torch.dtype, float] = {
    torch.float64: 1e-12,
    torch.float32: 1e-5,
    torch.float16: 2e-3,
    torch.bfloat16: 1.5e-2,
}


def tolerance(dtype: torch.dtype) -> float:
    """Relative (max-normalized) tolerance for results computed from inputs of ``dtype``."""
    try:
        return TOLERANCES[dtype]
    except KeyError:
        raise ValueError(f"no tolerance for dtype {dtype}; known: {list(TOLERANCES)}") from None
