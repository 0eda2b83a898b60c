"""linear_scan (CPU kernel) against the float64 reference, gradients, opcheck, compile, export."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend

import ssmscan
from ssmscan.testing import assert_close_to_reference, make_linear_scan_inputs

DTYPES = {"fp32": torch.float32, "fp64": torch.float64, "bf16": torch.bfloat16}
SHAPES = {
    "L1-dim-1": ((3, 1), -1),
    "L2-dim0": ((2, 3, 5), 0),
    "L63-dim1": ((2, 63, 4), 1),
    "L1000-dim-1": ((3, 1000), -1),
    "L301-dim1-wide": ((2, 301, 520), 1),  # more columns than one kernel block (512)
}


@pytest.mark.parametrize("reverse", [False, True], ids=["fwd", "rev"])
@pytest.mark.parametrize("with_initial", [False, True], ids=["h0none", "h0"])
@pytest.mark.parametrize("dt_name", list(DTYPES))
@pytest.mark.parametrize("shape_name", list(SHAPES))
def test_matches_reference(shape_name, dt_name, with_initial, reverse):
    shape, dim = SHAPES[shape_name]
    dtype = DTYPES[dt_name]
    a, b = make_linear_scan_inputs(shape, dtype=dtype, seed=len(shape_name), requires_grad=True)
    init_shape = tuple(s for i, s in enumerate(shape) if i != dim % len(shape))
    initial = (
        torch.randn(init_shape, dtype=torch.float64).to(dtype).requires_grad_()
        if with_initial
        else None
    )
    h = ssmscan.linear_scan(a, b, dim=dim, reverse=reverse, initial=initial)
    leaves = [t for t in (a, b, initial) if t is not None]
    ref_leaves = [t.detach().double().requires_grad_() for t in leaves]
    ref_initial = ref_leaves[2] if with_initial else None
    ref = ssmscan.linear_scan_reference(ref_leaves[0], ref_leaves[1], dim, reverse, ref_initial)
    assert h.dtype == dtype and h.shape == b.shape and h.is_contiguous()
    assert_close_to_reference("h", h, ref, dtype)
    g = torch.randn(h.shape, dtype=torch.float64).to(dtype)
    grads = torch.autograd.grad((h * g).sum(), leaves)
    ref_grads = torch.autograd.grad((ref * g.double()).sum(), ref_leaves)
    for name, x, r in zip(("da", "db", "dinitial"), grads, ref_grads):
        assert_close_to_reference(name, x, r, dtype)


def test_gradcheck_float64():
    a, b = make_linear_scan_inputs((2, 7, 3), dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    for reverse in (False, True):
        assert torch.autograd.gradcheck(
            lambda a, b, h0, reverse=reverse: ssmscan.linear_scan(a, b, 1, reverse, h0), (a, b, h0)
        )


def test_opcheck():
    for shape, dim, reverse in (((3, 9), 1, False), ((5, 2, 4), 0, True), ((2, 300, 3), 1, False)):
        a, b = make_linear_scan_inputs(shape, requires_grad=True)
        init = torch.randn([s for i, s in enumerate(shape) if i != dim], requires_grad=True)
        torch.library.opcheck(torch.ops.ssmscan.linear_scan_fwd.default, (a, b, init, dim, reverse))
        torch.library.opcheck(torch.ops.ssmscan.linear_scan_fwd.default, (a, b, None, dim, reverse))
        h = ssmscan.linear_scan(a, b, dim, reverse, init).detach()
        torch.library.opcheck(
            torch.ops.ssmscan.linear_scan_bwd.default,
            (torch.randn(shape), a.detach(), h, init.detach(), dim, reverse),
        )
    # a non-contiguous input
    a, b = make_linear_scan_inputs((4, 6))
    torch.library.opcheck(torch.ops.ssmscan.linear_scan_fwd.default, (a.t(), b.t(), None, 0, False))


def test_length_zero():
    a, b = make_linear_scan_inputs((3, 0))
    assert ssmscan.linear_scan(a, b).shape == (3, 0)


@pytest.mark.parametrize(
    ("kwargs", "exc", "pattern"),
    [
        (dict(a=torch.rand(3, 4), b=torch.rand(3, 5)), ValueError, r"a must have shape \(3, 5\)"),
        (
            dict(a=torch.rand(3, 4, dtype=torch.float64), b=torch.rand(3, 4)),
            TypeError,
            r"a must have dtype in \[torch.float32\]",
        ),
        (dict(a=torch.rand(3, 4), b=torch.rand(3, 4), dim=2), ValueError, r"dim=2 is out of range"),
        (
            dict(a=torch.rand(3, 4), b=torch.rand(3, 4), initial=torch.rand(4)),
            ValueError,
            r"initial must have shape \(3,\)",
        ),
        (
            dict(a=torch.ones(3, dtype=torch.int64), b=torch.ones(3, dtype=torch.int64)),
            TypeError,
            r"b must have dtype in",
        ),
    ],
    ids=["shape", "dtype", "dim", "initial", "int"],
)
def test_bad_inputs(kwargs, exc, pattern):
    with pytest.raises(exc, match=pattern):
        ssmscan.linear_scan(**kwargs)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compile_fullgraph_dynamic(backend):
    torch._dynamo.reset()
    counter = CompileCounterWithBackend(backend)

    def f(a, b, h0):
        return ssmscan.linear_scan(a, b, dim=1, initial=h0).square().sum()

    cf = torch.compile(f, backend=counter, fullgraph=True, dynamic=True)
    for L in (50, 91):
        a, b = make_linear_scan_inputs((2, L, 3), requires_grad=True, seed=L)
        h0 = torch.randn(2, 3, requires_grad=True)
        got = torch.autograd.grad(cf(a, b, h0), (a, b, h0))
        want = torch.autograd.grad(f(a, b, h0), (a, b, h0))
        for x, y in zip(got, want):
            torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-5)
    assert counter.frame_count == 1


def test_export_dynamic_length():
    class M(torch.nn.Module):
        def forward(self, a, b):
            return ssmscan.linear_scan(a, b, dim=-1)

    L = torch.export.Dim("L", min=2, max=10000)
    a, b = make_linear_scan_inputs((2, 40))
    ep = torch.export.export(M(), (a, b), dynamic_shapes=({1: L}, {1: L}))
    targets = [str(n.target) for n in ep.graph.nodes if "ssmscan" in str(n.target)]
    assert targets == ["ssmscan.linear_scan_fwd.default"]
    a, b = make_linear_scan_inputs((2, 333), seed=1)
    torch.testing.assert_close(ep.module()(a, b), ssmscan.linear_scan(a, b))
