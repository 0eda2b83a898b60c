"""Triton linear-scan kernel against the float64 reference (interpreter on CPU, compiled on GPU)."""

from __future__ import annotations

import os

import pytest
import torch

from ssmscan.ops.linear_scan.reference import linear_scan_reference
from ssmscan.testing import assert_close_to_reference, make_linear_scan_inputs

pytest.importorskip("triton")


@pytest.mark.triton
@pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1",
    reason="interpreter tests need TRITON_INTERPRET=1 (no GPU)",
)
@pytest.mark.parametrize("L,M", [(1, 3), (7, 5), (63, 130), (300, 2)], ids=lambda v: str(v))
@pytest.mark.parametrize("reverse", [False, True], ids=["fwd", "rev"])
@pytest.mark.parametrize("with_init", [False, True], ids=["zero", "init"])
def test_linear_scan_interpreter(L, M, reverse, with_init):
    from ssmscan.ops.linear_scan import triton_fwd

    a, b = make_linear_scan_inputs((L, M), seed=L + M)
    init = torch.randn(M, dtype=torch.float64).float() if with_init else None
    out = torch.full((L, M), float("nan"))
    triton_fwd.launch(a, b, init, out, reverse)
    ref = linear_scan_reference(
        a.double(), b.double(), 0, reverse, init.double() if with_init else None
    )
    assert_close_to_reference("h", out, ref, torch.float32)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.bfloat16, torch.float64], ids=["fp32", "bf16", "fp64"]
)
@pytest.mark.parametrize("reverse", [False, True], ids=["fwd", "rev"])
def test_linear_scan_op_gpu(dtype, reverse):
    import ssmscan

    a, b = make_linear_scan_inputs((3, 1000, 37), dtype=dtype, device="cuda", requires_grad=True)
    init = torch.randn(3, 37, device="cuda", dtype=dtype, requires_grad=True)
    h = ssmscan.linear_scan(a, b, dim=1, reverse=reverse, initial=init)
    g = torch.randn_like(h)
    grads = torch.autograd.grad(h, (a, b, init), g)
    ins = [t.detach().double().requires_grad_() for t in (a, b, init)]
    ref = linear_scan_reference(ins[0], ins[1], 1, reverse, ins[2])
    ref_grads = torch.autograd.grad(ref, ins, g.double())
    assert_close_to_reference("h", h, ref, dtype)
    for name, x, r in zip(("da", "db", "dinitial"), grads, ref_grads):
        assert_close_to_reference(name, x, r, dtype)
