"""The Triton kernels' softplus and sigmoid (``triton_common``) against float64, on float32
inputs over the range delta + delta_bias takes in Mamba (dt = softplus in [1e-4, 1] and beyond)
and far outside it; run under the interpreter on CPU (numpy arithmetic in float32, not the GPU's
approximate exp2 / division, whose extra error the GPU tests cover)."""

from __future__ import annotations

import pytest
import torch

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")

_INTERP = pytest.mark.skipif(
    torch.cuda.is_available(), reason="interpreter test (the GPU tests cover the compiled math)"
)


from ssmscan.ops.selective_scan.triton_common import _sigmoid, _softplus  # noqa: E402


@triton.jit
def _apply_kernel(x_ptr, y_ptr, n, SIGMOID: tl.constexpr, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = o < n
    x = tl.load(x_ptr + o, mask=m, other=0.0)
    # the portable reciprocal: the interpreter runs no inline PTX
    tl.store(y_ptr + o, _sigmoid(x, False) if SIGMOID else _softplus(x), mask=m)


def _run(fn_name: str, x: torch.Tensor) -> torch.Tensor:
    y = torch.empty_like(x)
    _apply_kernel[(triton.cdiv(x.numel(), 1024),)](
        x, y, x.numel(), SIGMOID=fn_name == "_sigmoid", BLOCK=1024
    )
    return y


@pytest.mark.triton
@_INTERP
def test_softplus_matches_float64():
    x = torch.cat(
        [torch.linspace(-30.0, 30.0, 60001), torch.tensor([-100.0, 19.99, 20.0, 20.01, 80.0])]
    )
    got = _run("_softplus", x).double()
    ref = torch.nn.functional.softplus(x.double())
    rel = (got - ref).abs() / ref
    rel[ref < 1e-37] = 0  # float32 denormals (x < -85): the GPU's exp2 flushes them to zero
    assert (got - ref)[ref < 1e-37].abs().max() < 1e-37
    mamba_range = (x > -10) & (x < 5)
    assert rel[mamba_range].max() < 1e-6, rel[mamba_range].max()
    assert rel.max() < 3e-6, rel.max()  # |x| * log2(e) rounds to a few ulp of 43 at x = -30
    assert torch.equal(got[x >= 20], x[x >= 20].double())  # F.softplus's threshold: exactly x
    nan = _run("_softplus", torch.tensor([float("nan"), float("inf"), -float("inf")]))
    assert nan[0].isnan() and nan[1] == float("inf") and nan[2] == 0


@pytest.mark.triton
@_INTERP
def test_sigmoid_matches_float64():
    x = torch.linspace(-40.0, 40.0, 40001)
    got = _run("_sigmoid", x).double()
    ref = torch.sigmoid(x.double())
    assert ((got - ref).abs() / ref).max() < 2e-6
    assert _run("_sigmoid", torch.tensor([-200.0]))[0] == 0
