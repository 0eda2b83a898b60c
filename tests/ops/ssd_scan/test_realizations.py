"""Realizations 2 (chunked parallel form in plain aten) and 3 (``higher_order.scan`` loop) of the
SSD scan against the float64 sequential reference: outputs, final states and gradients of every
tensor argument, at chunk boundaries and odd lengths; what their traces hold; export with a
dynamic length."""

from __future__ import annotations

import pytest
import torch
from torch._higher_order_ops.scan import scan_op
from torch.fx.experimental.proxy_tensor import make_fx

import ssmscan
from ssmscan.export._common import ExportReport
from ssmscan.export.tensorrt import lower_for_tensorrt
from ssmscan.ops.ssd_scan.loop import ssd_scan_loop
from ssmscan.ops.ssd_scan.parallel import ssd_scan_parallel
from ssmscan.ops.ssd_scan.reference import ssd_scan_reference
from ssmscan.passes import check_tensorrt_ready
from ssmscan.testing import assert_close_to_reference

REALIZATIONS = {"parallel": ssd_scan_parallel, "loop": ssd_scan_loop}
CHUNK = 16  # the parallel form's chunk: L = 63 and 257 end mid-chunk, 64 on a boundary
# name -> (factory options, realization options)
CONFIGS = {
    "plain": (dict(ngroups=1, D_shape=None), {}),
    "full": (
        dict(D_shape="channel", z=True, dt_bias=True, dt_softplus=True, initial_states=True),
        {},
    ),
    "Dhead-limit": (
        dict(ngroups=1, D_shape="head", dt_bias=True, dt_softplus=True),
        {"dt_limit": (0.005, 0.08)},
    ),
    "packed": (
        dict(D_shape="head", z=True, dt_softplus=True, initial_states=True, seq_idx=True),
        {},
    ),
}
ARG_ORDER = ("x", "dt", "A", "B", "C", "D", "z", "dt_bias", "initial_states", "seq_idx")
BANNED = ("ones_like", "zeros_like", "empty_like", "full_like", "new_", "alias")


def _leaves(kw, dtype=None):
    out = {}
    for k, v in kw.items():
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            v = v.detach().clone() if dtype is None else v.detach().to(dtype)
            out[k] = v.requires_grad_()
        else:
            out[k] = v
    return out


def _run(fn, kw, gy=None, gf=None, **options):
    """(out, final, {name: grad}, gy, gf) of sum(out * gy) + sum(final * gf)."""
    out, final = fn(**kw, **options)
    g = torch.Generator().manual_seed(7)
    gy = torch.randn(out.shape, generator=g, dtype=torch.float64) if gy is None else gy
    gf = torch.randn(final.shape, generator=g, dtype=torch.float64) if gf is None else gf
    torch.autograd.backward([out, final], [gy.to(out.dtype), gf.to(final.dtype)])
    grads = {k: v.grad for k, v in kw.items() if isinstance(v, torch.Tensor) and v.requires_grad}
    return out.detach(), final.detach(), grads, gy, gf


def _reference(**kw):
    return ssd_scan_reference(**kw, return_final_states=True)


def _compare(name, kw, dtype, **options):
    ref_out, ref_final, ref_grads, gy, gf = _run(
        _reference,
        _leaves(kw, torch.float64),
        **{k: v for k, v in options.items() if k not in ("chunk_size", "algorithm")},
    )
    if name == "parallel":
        options.setdefault("chunk_size", CHUNK)
    out, final, grads, _, _ = _run(REALIZATIONS[name], _leaves(kw), gy, gf, **options)
    sdt = torch.float64 if dtype == torch.float64 else torch.float32
    batch, _, nheads, headdim = kw["x"].shape
    assert out.shape == kw["x"].shape and out.dtype == dtype and out.is_contiguous()
    assert final.shape == (batch, nheads, headdim, kw["B"].shape[-1])
    assert final.dtype == sdt and final.is_contiguous()
    assert_close_to_reference(f"{name} out", out, ref_out, dtype)
    assert_close_to_reference(f"{name} final_states", final, ref_final, dtype)
    assert set(grads) == set(ref_grads) and len(grads) >= 5
    for k in ref_grads:
        assert grads[k].dtype == kw[k].dtype and grads[k].shape == kw[k].shape, k
        assert_close_to_reference(f"{name} grad {k}", grads[k], ref_grads[k], dtype)


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("L", [1, 2, 63, 64, 257], ids=lambda L: f"L{L}")
@pytest.mark.parametrize("name", list(REALIZATIONS))
def test_fp32_against_float64_reference(name, L, config, ssd_inputs):
    factory, options = CONFIGS[config]
    _compare(name, ssd_inputs(L=L, seed=L, **factory), torch.float32, **options)


@pytest.mark.parametrize(
    "dtype", [torch.bfloat16, torch.float16, torch.float64], ids=["bf16", "fp16", "fp64"]
)
@pytest.mark.parametrize("name", list(REALIZATIONS))
def test_other_dtypes(name, dtype, ssd_inputs):
    factory, _ = CONFIGS["full"]
    _compare(name, ssd_inputs(L=63, dtype=dtype, seed=3, **factory), dtype)


@pytest.mark.parametrize("chunk_size", [1, 7, 64, 100, None], ids=lambda q: f"Q{q}")
def test_parallel_chunk_sizes(chunk_size, ssd_inputs):
    """The chunk changes the rounding, never the result: one step, odd, the length, beyond it,
    and the planner's."""
    factory, _ = CONFIGS["packed"]
    _compare("parallel", ssd_inputs(L=64, seed=5, **factory), torch.float32, chunk_size=chunk_size)


@pytest.mark.parametrize("algorithm", ["hillis_steele", "blelloch", "chunked"])
def test_parallel_scan_across_chunks(algorithm, ssd_inputs):
    """Each parallel scan over the chunks' states (33 chunks of 8 steps, packed sequences)."""
    factory, _ = CONFIGS["packed"]
    kw = ssd_inputs(L=257, seed=6, **factory)
    _compare("parallel", kw, torch.float32, chunk_size=8, algorithm=algorithm)


@pytest.mark.parametrize("name", list(REALIZATIONS))
def test_fp32_parameters_with_bf16_activations(name, ssd_inputs):
    """mamba-ssm's models hold A, D, dt_bias in float32 beside bfloat16 activations; B, C and dt
    may be float32 too."""
    kw = ssd_inputs(L=33, dtype=torch.bfloat16, seed=2, **CONFIGS["full"][0])
    kw["B"], kw["C"], kw["dt"] = kw["B"].float(), kw["C"].float(), kw["dt"].float()
    _compare(name, kw, torch.bfloat16)


@pytest.mark.parametrize("name", list(REALIZATIONS))
def test_length_zero_passes_the_state_through(name, ssd_inputs):
    kw = ssd_inputs(L=0, **CONFIGS["full"][0])
    out, final = REALIZATIONS[name](**kw)
    assert out.shape == (2, 0, 4, 4)
    torch.testing.assert_close(final, kw["initial_states"], rtol=0, atol=0)


@pytest.mark.parametrize("name", list(REALIZATIONS))
def test_impl_of_ssd_scan(name, ssd_inputs):
    """``ssmscan.ssd_scan(impl=...)`` runs the realization, within the CPU kernel's rounding."""
    kw = ssd_inputs(L=40, seed=4, **CONFIGS["packed"][0])
    out, final = ssmscan.ssd_scan(**kw, chunk_size=CHUNK, return_final_states=True, impl=name)
    op_out, op_final = ssmscan.ssd_scan(**kw, chunk_size=CHUNK, return_final_states=True)
    torch.testing.assert_close(out, op_out, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(final, op_final, rtol=1e-5, atol=1e-5)
    alone = ssmscan.ssd_scan(**kw, impl=name)
    torch.testing.assert_close(alone, out, rtol=1e-5, atol=1e-5)


def test_impl_arguments_are_still_checked(ssd_inputs):
    kw = ssd_inputs(L=8)
    kw["A"] = kw["A"][:3]
    with pytest.raises(ValueError, match=r"A must have shape"):
        ssmscan.ssd_scan(**kw, impl="loop")


def _trace(fn, kw, **options):
    tensors = [kw.get(k) for k in ARG_ORDER]
    softplus = kw.get("dt_softplus", False)
    return make_fx(lambda *a: fn(*a, softplus, **options), tracing_mode="fake")(*tensors)


def _targets(gm):
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]


@pytest.mark.parametrize("L", [1, 16, 63], ids=lambda L: f"L{L}")
def test_parallel_trace_is_plain_aten_without_factories(L, ssd_inputs):
    """No higher-order op, no ``*_like`` / ``new_*`` factory, no ``alias``: what Torch-TensorRT
    and ONNX convert (one chunk, a whole chunk, a padded one)."""
    kw = ssd_inputs(L=L, dtype=torch.bfloat16, **CONFIGS["packed"][0])
    targets = _targets(_trace(ssd_scan_parallel, kw, chunk_size=CHUNK))
    assert all(t.startswith("aten.") for t in targets), targets
    assert not any(bad in t for t in targets for bad in BANNED), targets
    assert "aten.bmm.default" in targets  # the chunks are matmuls


def test_parallel_memory_is_linear_in_the_length(ssd_inputs):
    """Nothing quadratic in L: the largest intermediate doubles (not quadruples) with L."""

    def largest(L):
        gm = _trace(ssd_scan_parallel, ssd_inputs(L=L, **CONFIGS["packed"][0]), chunk_size=CHUNK)
        vals = (n.meta.get("val") for n in gm.graph.nodes)
        return max(v.numel() for v in vals if isinstance(v, torch.Tensor))

    small, large = largest(512), largest(1024)
    assert large <= 2.1 * small, (small, large)


def test_parallel_needs_a_static_length(ssd_inputs):
    kw = ssd_inputs(L=8, ngroups=1, D_shape=None)

    class M(torch.nn.Module):
        def forward(self, x, dt, A, B, C):
            return ssd_scan_parallel(x, dt, A, B, C)

    L = torch.export.Dim("L", min=2)
    args = tuple(kw[k] for k in ("x", "dt", "A", "B", "C"))
    with pytest.raises(Exception, match="loop realization"):
        torch.export.export(
            M(), args, dynamic_shapes=({1: L}, {1: L}, None, {1: L}, {1: L}), strict=False
        )


def test_loop_trace_is_one_scan_of_constant_size(ssd_inputs):
    """One ``higher_order.scan`` whose body updates and reads the state; the graph is the same
    size at every length."""
    sizes = set()
    for L in (8, 257):
        gm = _trace(ssd_scan_loop, ssd_inputs(L=L, **CONFIGS["packed"][0]))
        assert [n.target for n in gm.graph.nodes].count(scan_op) == 1
        sizes.add(len(gm.graph.nodes))
        body = next(m for m in gm.children() if isinstance(m, torch.fx.GraphModule))
        assert "torch.ops.aten.sum" in body.code and "torch.ops.aten.exp" not in body.code
    assert len(sizes) == 1, sizes


def _loop_module():
    class M(torch.nn.Module):
        def forward(self, x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx):
            return ssd_scan_loop(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, True)

    return M()


def test_loop_exports_with_a_dynamic_length(ssd_inputs):
    factory = CONFIGS["packed"][0] | {"D_shape": "channel", "dt_bias": True}
    kw = ssd_inputs(L=9, **factory)
    L = torch.export.Dim("L", min=1)
    per_step = {"x", "dt", "B", "C", "z", "seq_idx"}
    ds = tuple({1: L} if k in per_step else None for k in ARG_ORDER)
    ep = torch.export.export(_loop_module(), tuple(kw[k] for k in ARG_ORDER), dynamic_shapes=ds)
    assert not any("ssmscan" in str(n.target) for n in ep.graph.nodes)
    for length in (1, 2, 63, 257):
        kw2 = ssd_inputs(L=length, seed=length, **factory)
        out, final = ep.module()(*(kw2[k] for k in ARG_ORDER))
        ref = {k: v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v
               for k, v in kw2.items()}  # fmt: skip
        ref_out, ref_final = _reference(**ref)
        assert_close_to_reference(f"L{length} out", out, ref_out, torch.float32)
        assert_close_to_reference(f"L{length} final_states", final, ref_final, torch.float32)


def test_parallel_export_is_tensorrt_ready(ssd_inputs):
    """A static, non-power-of-two length with every option: after ``run_decompositions`` (and
    without export's metadata assertions, as Torch-TensorRT drops them) every op is in
    Torch-TensorRT's converter set."""
    kw = ssd_inputs(L=37, **(CONFIGS["packed"][0] | {"D_shape": "channel", "dt_bias": True}))

    class M(torch.nn.Module):
        def forward(self, x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx):
            return ssd_scan_parallel(
                x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, True, chunk_size=CHUNK
            )

    args = tuple(kw[k] for k in ARG_ORDER)
    ep = lower_for_tensorrt(torch.export.export(M(), args), "auto", ExportReport("tensorrt"))
    readiness = check_tensorrt_ready(ep)
    assert readiness.ready, readiness
    out, final = ep.module()(*args)
    want_out, want_final = ssd_scan_parallel(**kw, chunk_size=CHUNK)
    torch.testing.assert_close(out, want_out)
    torch.testing.assert_close(final, want_final)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(REALIZATIONS))
def test_compiles_fullgraph(name, ssd_inputs):
    kw = ssd_inputs(L=37, **CONFIGS["packed"][0])
    compiled = torch.compile(REALIZATIONS[name], fullgraph=True, backend="aot_eager")
    for got, want in zip(compiled(**kw), REALIZATIONS[name](**kw), strict=True):
        torch.testing.assert_close(got, want)
