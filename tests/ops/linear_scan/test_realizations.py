"""Realizations 2 (parallel aten scan) and 3 (``higher_order.scan`` loop) of ``linear_scan``
against the float64 reference: every dim, both directions, with and without an initial state."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch._higher_order_ops.scan import scan_op
from torch.fx.experimental.proxy_tensor import make_fx

from ssmscan.ops.linear_scan.loop import linear_scan_loop
from ssmscan.ops.linear_scan.parallel import linear_scan_parallel
from ssmscan.ops.linear_scan.reference import linear_scan_reference
from ssmscan.testing import assert_close_to_reference, make_linear_scan_inputs

REALIZATIONS = {"parallel": linear_scan_parallel, "loop": linear_scan_loop}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
BANNED = ("ones_like", "zeros_like", "empty_like", "full_like", "new_")


def _inputs(shape, dim, dtype, with_initial, seed=0):
    a, b = make_linear_scan_inputs(shape, dtype, seed=seed)
    initial = None
    if with_initial:
        g = torch.Generator().manual_seed(seed + 1)
        rest = [s for i, s in enumerate(shape) if i != dim % len(shape)]
        initial = torch.randn(rest, generator=g, dtype=torch.float64).to(dtype)
    return a, b, initial


def _check(name, a, b, dim, reverse, initial, dtype, **options):
    h = REALIZATIONS[name](a, b, dim, reverse, initial, **options)
    ref = linear_scan_reference(
        a.double(), b.double(), dim, reverse, None if initial is None else initial.double()
    )
    assert h.shape == b.shape and h.dtype == b.dtype and h.is_contiguous()
    assert_close_to_reference(f"{name} h", h, ref, dtype)


def _cases():
    for L, dim, reverse, with_initial, dt_name in itertools.product(
        (1, 7, 63, 301, 1000), (0, 1, -1), (False, True), (False, True), DTYPES
    ):
        if L == 1000 and (dim != 1 or with_initial):
            continue
        shape = [3, 5]
        shape.insert(dim % 3, L)
        d = "last" if dim == -1 else str(dim)
        rid = f"{'x'.join(map(str, shape))}-dim{d}-{'rev' if reverse else 'fwd'}"
        yield pytest.param(
            tuple(shape),
            dim,
            reverse,
            with_initial,
            DTYPES[dt_name],
            id=f"{rid}-{'h0' if with_initial else 'zero'}-{dt_name}",
        )


@pytest.mark.parametrize("name", list(REALIZATIONS))
@pytest.mark.parametrize(("shape", "dim", "reverse", "with_initial", "dtype"), list(_cases()))
def test_matches_reference(name, shape, dim, reverse, with_initial, dtype):
    a, b, initial = _inputs(shape, dim, dtype, with_initial)
    _check(name, a, b, dim, reverse, initial, dtype)


@pytest.mark.parametrize("algorithm", ["hillis_steele", "blelloch", "chunked"])
@pytest.mark.parametrize("reverse", [False, True], ids=["fwd", "rev"])
def test_parallel_algorithms(algorithm, reverse):
    a, b, initial = _inputs((4, 301), 1, torch.float32, True)
    _check("parallel", a, b, 1, reverse, initial, torch.float32, algorithm=algorithm)


@pytest.mark.parametrize("name", list(REALIZATIONS))
@pytest.mark.parametrize(
    "dtype", [torch.float16, torch.float64], ids=lambda d: str(d).removeprefix("torch.")
)
def test_other_dtypes(name, dtype):
    a, b, initial = _inputs((2, 63, 3), 1, dtype, True)
    _check(name, a, b, 1, False, initial, dtype)


@pytest.mark.parametrize("name", list(REALIZATIONS))
def test_matches_the_op(name):
    a, b, initial = _inputs((4, 100, 3), 1, torch.float32, True)
    got = REALIZATIONS[name](a, b, 1, True, initial)
    torch.testing.assert_close(got, torch.ops.ssmscan.linear_scan_fwd(a, b, initial, 1, True))


@pytest.mark.parametrize("name", list(REALIZATIONS))
def test_length_zero(name):
    a, b, _ = _inputs((2, 0, 3), 1, torch.float32, False)
    assert REALIZATIONS[name](a, b, 1).shape == (2, 0, 3)


def test_parallel_trace_is_plain_aten():
    a, b, initial = _inputs((2, 63, 3), 1, torch.bfloat16, True)
    gm = make_fx(lambda *x: linear_scan_parallel(x[0], x[1], 1, True, x[2]), tracing_mode="fake")(
        a, b, initial
    )
    targets = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    assert all(t.startswith("aten.") for t in targets), targets
    assert not any(bad in t for t in targets for bad in BANNED), targets


def test_loop_exports_with_a_dynamic_length():
    class M(torch.nn.Module):
        def forward(self, a, b, initial):
            return linear_scan_loop(a, b, 1, True, initial)

    a, b, initial = _inputs((2, 8, 3), 1, torch.float32, True)
    L = torch.export.Dim("L", min=1)
    ep = torch.export.export(M(), (a, b, initial), dynamic_shapes=({1: L}, {1: L}, None))
    assert [n.target for n in ep.graph.nodes].count(scan_op) == 1
    for length in (1, 7, 63):
        a, b, initial = _inputs((2, length, 3), 1, torch.float32, True, seed=length)
        ref = linear_scan_reference(a.double(), b.double(), 1, True, initial.double())
        assert_close_to_reference("h", ep.module()(a, b, initial), ref, torch.float32)


@pytest.mark.parametrize("name", list(REALIZATIONS))
def test_compiles_fullgraph(name):
    a, b, initial = _inputs((2, 37, 3), 1, torch.float32, True)
    compiled = torch.compile(REALIZATIONS[name], fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(
        compiled(a, b, 1, True, initial), REALIZATIONS[name](a, b, 1, True, initial)
    )
