"""Bad inputs raise TypeError/ValueError naming the argument, what it got and what was expected."""

from __future__ import annotations

import pytest
import torch

import ssmscan
from ssmscan.testing import make_selective_scan_inputs


def _kw(**changes):
    kw = make_selective_scan_inputs(2, 4, 9, 3, groups=None, has_initial_state=True)
    kw.update(changes)
    return kw


CASES = {
    "batch-mismatch": (
        dict(delta=torch.randn(3, 4, 9)),
        ValueError,
        r"delta must have shape \(2, 4, 9\).*got shape \(3, 4, 9\)",
    ),
    "dim-mismatch": (
        dict(z=torch.randn(2, 5, 9)),
        ValueError,
        r"z must have shape \(2, 4, 9\).*got shape \(2, 5, 9\)",
    ),
    "L-mismatch": (
        dict(B=torch.randn(2, 3, 8)),
        ValueError,
        r"B must have shape \(2, 3, 9\).*got shape \(2, 3, 8\)",
    ),
    "C-mismatch": (dict(C=torch.randn(2, 3, 10)), ValueError, r"C must have shape \(2, 3, 9\)"),
    "A-not-2d": (dict(A=-torch.rand(4)), ValueError, r"A must be 2-D \(dim, N\); got shape \(4,\)"),
    "A-wrong-dim": (
        dict(A=-torch.rand(5, 3)),
        ValueError,
        r"A must have shape \(dim=4, N\); got shape \(5, 3\)",
    ),
    "groups-not-dividing": (
        dict(B=torch.randn(2, 3, 3, 9), C=torch.randn(2, 3, 3, 9)),
        ValueError,
        r"dim=4 must be divisible by the number of groups G=3",
    ),
    "u-int": (
        dict(u=torch.ones(2, 4, 9, dtype=torch.int32)),
        TypeError,
        r"u must have dtype in .*got shape \(2, 4, 9\), dtype torch.int32",
    ),
    "delta-dtype": (
        dict(delta=torch.rand(2, 4, 9, dtype=torch.float64)),
        TypeError,
        r"delta must have dtype in \[torch.float32\] \(the dtype of u\); got .*float64",
    ),
    "A-half": (
        dict(A=-torch.rand(4, 3).half()),
        TypeError,
        r"A must have dtype in \[torch.float32\]",
    ),
    "D-shape": (dict(D=torch.randn(2, 4)), ValueError, r"D must have shape \(4,\)"),
    "bias-shape": (
        dict(delta_bias=torch.randn(3)),
        ValueError,
        r"delta_bias must have shape \(4,\)",
    ),
    "h0-shape": (
        dict(initial_state=torch.randn(2, 4, 2)),
        ValueError,
        r"initial_state must have shape \(2, 4, 3\)",
    ),
    "h0-dtype": (
        dict(initial_state=torch.randn(2, 4, 3).bfloat16()),
        TypeError,
        r"initial_state must have dtype in \[torch.float32\] \(the state dtype\)",
    ),
    "u-3d": (
        dict(u=torch.randn(2, 4)),
        ValueError,
        r"u must be 3-D \(batch, dim, L\); got shape \(2, 4\)",
    ),
    "not-a-tensor": (dict(B=[1.0]), TypeError, r"B must be a torch.Tensor, got list"),
    "mixed-devices": (
        dict(D=torch.randn(4, device="meta")),
        ValueError,
        r"D is on device meta but u is on cpu",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input(case):
    changes, exc, pattern = CASES[case]
    with pytest.raises(exc, match=pattern):
        ssmscan.selective_scan(**_kw(**changes))


def test_bad_impl_names_the_choices():
    with pytest.raises(
        ValueError, match=r"impl must be one of 'auto', 'cpu', 'triton', 'reference'; got 'fast'"
    ):
        ssmscan.selective_scan(**_kw(), impl="fast")


def test_triton_impl_on_cpu_tensors_is_refused():
    with pytest.raises(ValueError, match=r"impl='triton' runs on cuda tensors; got u on cpu"):
        ssmscan.selective_scan(**_kw(), impl="triton")
