"""Realizations 2 (parallel aten scan) and 3 (``higher_order.scan`` loop) of the selective scan
against the float64 reference: outputs, final states, dtypes, layouts, and what their traces hold."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch._higher_order_ops.scan import scan_op
from torch.fx.experimental.proxy_tensor import make_fx

import ssmscan
from ssmscan.ops.selective_scan.loop import selective_scan_loop
from ssmscan.ops.selective_scan.parallel import selective_scan_parallel
from ssmscan.ops.selective_scan.shapes import empty_forward_outputs
from ssmscan.testing import assert_close_to_reference, make_selective_scan_inputs

REALIZATIONS = {"parallel": selective_scan_parallel, "loop": selective_scan_loop}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
# optional inputs: (D, z, delta_bias, softplus, initial_state)
FLAG_SETS = {
    "all": (True, True, True, True, True),
    "none": (False, False, False, False, False),
    "zD": (True, True, False, False, False),
}
BANNED = ("ones_like", "zeros_like", "empty_like", "full_like", "new_")


def _inputs(B, D, L, N, groups, dtype, flags, seed=0):
    has_D, has_z, has_bias, softplus, has_h0 = FLAG_SETS[flags]
    return make_selective_scan_inputs(
        B,
        D,
        L,
        N,
        groups=groups,
        dtype=dtype,
        has_D=has_D,
        has_z=has_z,
        has_delta_bias=has_bias,
        delta_softplus=softplus,
        has_initial_state=has_h0,
        seed=seed,
    )


def _reference(kw):
    ref_in = {k: (v.double() if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}
    return ssmscan.selective_scan_reference(**ref_in, return_last_state=True)


def _check(name, kw, dtype, **options):
    out, last = REALIZATIONS[name](**kw, **options)
    ref_out, ref_last = _reference(kw)
    want_out, want_last, _ = empty_forward_outputs(kw["u"], kw["A"])  # the op's contract
    for got, want in ((out, want_out), (last, want_last)):
        assert got.shape == want.shape and got.dtype == want.dtype and got.is_contiguous()
    assert_close_to_reference(f"{name} out", out, ref_out, dtype)
    assert_close_to_reference(f"{name} last_state", last, ref_last, dtype)


def _cases():
    for L, groups, dt_name, flags in itertools.product(
        (1, 7, 63, 301, 1000), (None, 2), DTYPES, FLAG_SETS
    ):
        if L == 1000 and (groups is not None or flags == "zD"):
            continue  # the long length: every dtype, two flag sets, 3-D B/C
        g = "3d" if groups is None else f"G{groups}"
        yield pytest.param(
            L, groups, DTYPES[dt_name], flags, id=f"B2-D8-L{L}-N4-{g}-{dt_name}-{flags}"
        )


@pytest.mark.parametrize("name", list(REALIZATIONS))
@pytest.mark.parametrize(("L", "groups", "dtype", "flags"), list(_cases()))
def test_matches_reference(name, L, groups, dtype, flags):
    _check(name, _inputs(2, 8, L, 4, groups, dtype, flags), dtype)


@pytest.mark.parametrize("algorithm", ["hillis_steele", "blelloch", "chunked"])
@pytest.mark.parametrize("L", [63, 301], ids=lambda n: f"L{n}")
def test_parallel_algorithms(algorithm, L):
    kw = _inputs(2, 8, L, 4, 2, torch.float32, "all")
    _check("parallel", kw, torch.float32, algorithm=algorithm)


@pytest.mark.parametrize("name", list(REALIZATIONS))
@pytest.mark.parametrize(
    "dtype", [torch.float16, torch.float64], ids=lambda d: str(d).removeprefix("torch.")
)
def test_other_dtypes(name, dtype):
    _check(name, _inputs(2, 8, 63, 16, None, dtype, "all"), dtype)


@pytest.mark.parametrize("name", list(REALIZATIONS))
def test_fp32_B_C_with_bf16_inputs(name):
    kw = _inputs(1, 4, 33, 4, 2, torch.bfloat16, "all")
    kw["B"], kw["C"] = kw["B"].float(), kw["C"].float()
    _check(name, kw, torch.bfloat16)


@pytest.mark.parametrize("name", list(REALIZATIONS))
def test_matches_the_op_bitwise_close(name):
    """Same accumulation dtype as the CPU kernel: fp32 results agree far inside the tolerance."""
    kw = _inputs(2, 8, 100, 4, 2, torch.float32, "all")
    out, last = REALIZATIONS[name](**kw)
    op_out, op_last = ssmscan.selective_scan(**kw, return_last_state=True)
    torch.testing.assert_close(out, op_out, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(last, op_last, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", list(REALIZATIONS))
def test_length_zero_passes_the_state_through(name):
    kw = _inputs(2, 4, 0, 3, None, torch.float32, "all")
    out, last = REALIZATIONS[name](**kw)
    assert out.shape == (2, 4, 0)
    torch.testing.assert_close(last, kw["initial_state"])


def _trace_targets(fn, kw):
    gm = make_fx(lambda *a: fn(*a[:8], kw["delta_softplus"], a[8]), tracing_mode="fake")(
        *(kw[k] for k in ("u", "delta", "A", "B", "C", "D", "z", "delta_bias", "initial_state"))
    )
    return gm, [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]


def test_parallel_trace_is_plain_aten():
    """No higher-order op, no constant factory: what Torch-TensorRT and ONNX convert."""
    kw = _inputs(2, 8, 63, 4, 2, torch.bfloat16, "all")
    _, targets = _trace_targets(selective_scan_parallel, kw)
    assert all(t.startswith("aten.") for t in targets), targets
    assert not any(bad in t for t in targets for bad in BANNED), targets


def test_loop_trace_is_one_scan_with_a_per_step_body():
    """One ``higher_order.scan``; the body computes exp(dt A) per step (no (.., N, L) decays)."""
    kw = _inputs(2, 8, 63, 4, 2, torch.float32, "all")
    gm, targets = _trace_targets(selective_scan_loop, kw)
    assert [n.target for n in gm.graph.nodes].count(scan_op) == 1
    assert "aten.exp.default" not in targets  # only inside the body
    body = next(m for m in gm.children() if isinstance(m, torch.fx.GraphModule))
    assert "torch.ops.aten.exp.default" in body.code


def test_parallel_needs_a_static_length():
    kw = _inputs(1, 4, 8, 2, None, torch.float32, "none")

    class M(torch.nn.Module):
        def forward(self, u, delta, A, B, C):
            return selective_scan_parallel(u, delta, A, B, C)

    L = torch.export.Dim("L", min=2)
    args = tuple(kw[k] for k in ("u", "delta", "A", "B", "C"))
    with pytest.raises(Exception, match="loop realization"):
        torch.export.export(
            M(), args, dynamic_shapes=({2: L}, {2: L}, None, {2: L}, {2: L}), strict=False
        )


def test_loop_exports_with_a_dynamic_length():
    kw = _inputs(1, 4, 8, 2, 2, torch.float32, "all")
    names = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias", "initial_state")

    class M(torch.nn.Module):
        def forward(self, u, delta, A, B, C, D, z, delta_bias, initial_state):
            return selective_scan_loop(u, delta, A, B, C, D, z, delta_bias, True, initial_state)

    L = torch.export.Dim("L", min=1)
    ds = ({2: L}, {2: L}, None, {3: L}, {3: L}, None, {2: L}, None, None)
    ep = torch.export.export(M(), tuple(kw[k] for k in names), dynamic_shapes=ds)
    for length in (1, 7, 63):
        kw2 = _inputs(1, 4, length, 2, 2, torch.float32, "all", seed=length)
        out, last = ep.module()(*(kw2[k] for k in names))
        ref_out, ref_last = _reference(kw2)
        assert_close_to_reference("out", out, ref_out, torch.float32)
        assert_close_to_reference("last_state", last, ref_last, torch.float32)


@pytest.mark.parametrize("name", list(REALIZATIONS))
def test_compiles_fullgraph(name):
    kw = _inputs(1, 4, 37, 2, 2, torch.float32, "all")
    compiled = torch.compile(REALIZATIONS[name], fullgraph=True, backend="aot_eager")
    for got, want in zip(compiled(**kw), REALIZATIONS[name](**kw), strict=True):
        torch.testing.assert_close(got, want)
