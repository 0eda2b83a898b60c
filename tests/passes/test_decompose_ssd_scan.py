"""decompose_selective_scan on Mamba-2's ``ssmscan::ssd_scan_fwd``: replaced by the chunked
parallel form (static L) or the ``higher_order.scan`` loop (any L); what the graph holds
afterwards, numerics against the float64 reference, declines that leave the graph unchanged,
explain / check_tensorrt_ready / the pipelines, and the artifacts (ONNX, Torch-TensorRT's
partitioner)."""

from __future__ import annotations

import pytest
import torch
from torch._higher_order_ops.scan import scan_op
from torch.fx.experimental.proxy_tensor import make_fx

import ssmscan
from ssmscan.export._common import ExportReport
from ssmscan.export.tensorrt import lower_for_tensorrt
from ssmscan.ops.ssd_scan.reference import ssd_scan_reference
from ssmscan.passes import (
    LOOP_REALIZATION_PIPELINE,
    PARALLEL_REALIZATION_PIPELINE,
    check_tensorrt_ready,
    decompose_selective_scan,
    explain,
    run_pipeline,
)
from ssmscan.testing import assert_close_to_reference

NAMES = ("x", "dt", "A", "B", "C", "D", "z", "dt_bias", "initial_states", "seq_idx")
PER_STEP = {"x", "dt", "B", "C", "z", "seq_idx"}
BANNED = ("ones_like", "zeros_like", "empty_like", "full_like", "new_")


class Block(torch.nn.Module):
    """An SSD scan with every option, its output read by a later op."""

    def forward(self, x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx):
        out, final = ssmscan.ssd_scan(
            x, dt, A, B, C, 16, D, z, dt_bias, initial_states, seq_idx,
            dt_softplus=True, dt_limit=(0.0, 0.5), return_final_states=True,
        )  # fmt: skip
        return out * 2.0, final


def _inputs(L, seed=0, batch=2, nheads=4, headdim=4, ngroups=2, dstate=8):
    """Mamba-2-like inputs (never zeros): dt around softplus^-1 of [1e-3, 0.1], three packed
    sequences per row (row 1 starts at sequence 1, so it ignores the initial state)."""
    g = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=g)

    cuts = torch.sort(torch.randint(1, max(L, 2), (batch, 2), generator=g), dim=1).values
    seq = (torch.arange(L)[None, :, None] >= cuts[:, None, :]).sum(-1)
    kw = {
        "x": randn(batch, L, nheads, headdim),
        "dt": torch.rand(batch, L, nheads, generator=g) * 2.0 - 5.0,
        "A": -torch.exp(0.5 * randn(nheads)),
        "B": randn(batch, L, ngroups, dstate),
        "C": randn(batch, L, ngroups, dstate),
        "D": randn(nheads, headdim),
        "z": randn(batch, L, nheads, headdim),
        "dt_bias": torch.rand(nheads, generator=g) - 1.0,
        "initial_states": 0.5 * randn(batch, nheads, headdim, dstate),
        "seq_idx": (seq + torch.arange(batch)[:, None].clamp(max=1)).to(torch.int32),
    }
    return tuple(kw[k] for k in NAMES)


def _check_numerics(outputs, args, dtype=torch.float32):
    a64 = [a.double() if a.is_floating_point() else a for a in args]
    out, final = ssd_scan_reference(
        *a64, dt_softplus=True, dt_limit=(0.0, 0.5), return_final_states=True
    )
    assert_close_to_reference("out", outputs[0], 2.0 * out, dtype)
    assert_close_to_reference("final_states", outputs[1], final, dtype)


def _dynamic_shapes():
    L = torch.export.Dim("L", min=2, max=1 << 16)
    return tuple({1: L} if k in PER_STEP else None for k in NAMES)


def _ssmscan_nodes(gm):
    return [n for n in gm.graph.nodes if n.op == "call_function" and "ssmscan" in str(n.target)]


def _hops(gm):
    return [
        n
        for n in gm.graph.nodes
        if n.op == "call_function" and isinstance(n.target, torch._ops.HigherOrderOperator)
    ]


def _assert_realized(gm, realization, L=None):
    assert not _ssmscan_nodes(gm)
    if realization == "parallel":
        assert not _hops(gm)
        targets = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
        assert not any(bad in t for t in targets for bad in BANNED), targets
    elif L == 1:  # a static single step is emitted without a loop (see run_scan)
        assert not _hops(gm)
    else:
        assert [n.target for n in _hops(gm)] == [scan_op]


@pytest.mark.parametrize("realization", ["parallel", "loop"])
@pytest.mark.parametrize(
    ("L", "decomposed"),
    [
        pytest.param(L, dec, id=f"B2-L{L}-H4-P4-G2-N8-fp32-{'decomposed' if dec else 'export'}")
        for L, dec in [(1, False), (37, False), (37, True), (257, False)]
    ],
)
def test_replaces_the_op(realization, L, decomposed):
    args = _inputs(L)
    ep = torch.export.export(Block(), args)
    if decomposed:
        ep = ep.run_decompositions()
    assert len(_ssmscan_nodes(ep.graph_module)) == 1
    result = decompose_selective_scan(ep, realization)
    assert result.changed and [d.op for d in result.decisions] == ["ssd_scan_fwd"]
    assert result.decisions[0].lowered, result.decisions
    _assert_realized(ep.graph_module, realization, L)
    for n in ep.graph.nodes:
        if n.op == "call_function" and n.target is not scan_op:
            assert isinstance(n.meta.get("val"), (torch.Tensor, list, tuple)), n
    ep.validate()
    _check_numerics(ep.module()(*args), args)


def test_loop_with_a_dynamic_length():
    ep = torch.export.export(Block(), _inputs(16), dynamic_shapes=_dynamic_shapes())
    assert decompose_selective_scan(ep, "loop").changed
    _assert_realized(ep.graph_module, "loop")
    for L in (2, 63, 257):
        args = _inputs(L, seed=L)
        _check_numerics(ep.module()(*args), args)


def test_loop_graph_size_does_not_grow_with_the_length():
    sizes = set()
    for L in (9, 257):
        ep = torch.export.export(Block(), _inputs(L))
        decompose_selective_scan(ep, "loop")
        sizes.add(len(ep.graph.nodes))
    assert len(sizes) == 1, sizes


def test_parallel_declines_a_dynamic_length_naming_loop():
    ep = torch.export.export(Block(), _inputs(16), dynamic_shapes=_dynamic_shapes())
    before = ep.graph_module.code
    result = decompose_selective_scan(ep, "parallel")
    assert not result.changed
    (decision,) = result.decisions
    assert decision.op == "ssd_scan_fwd" and not decision.lowered and "loop" in decision.reason
    assert ep.graph_module.code == before


@pytest.mark.parametrize("realization", ["parallel", "loop"])
def test_graph_module_from_make_fx(realization):
    args = _inputs(40)
    gm = make_fx(Block(), tracing_mode="fake")(*args)
    assert decompose_selective_scan(gm, realization).changed
    _assert_realized(gm, realization, 40)
    _check_numerics(gm(*args), args)


class CallsTheCpuKernel(torch.nn.Module):
    """The op's CPU body called directly, as a graph traced through the triton_op holds it."""

    def forward(self, x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx):
        out, final = torch.ops.ssmscan.ssd_scan_fwd_cpu(
            x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, True, 0.0, 0.5, 16
        )
        return out * 2.0, final


@pytest.mark.parametrize("realization", ["parallel", "loop"])
def test_replaces_the_cpu_kernel_op(realization):
    args = _inputs(37)
    ep = torch.export.export(CallsTheCpuKernel(), args)
    result = decompose_selective_scan(ep, realization)
    assert result.changed and result.decisions[0].lowered, result.decisions
    _assert_realized(ep.graph_module, realization)
    _check_numerics(ep.module()(*args), args)


def test_explain_before_and_after():
    static = torch.export.export(Block(), _inputs(37))
    dynamic = torch.export.export(Block(), _inputs(16), dynamic_shapes=_dynamic_shapes())
    for ep, would in ((static, "chunked"), (dynamic, "loop")):
        (before,) = explain(ep).decisions
        assert (before.op, before.lowered, before.algorithm) == ("ssd_scan_fwd", False, would)
        decompose_selective_scan(ep, "parallel" if would == "chunked" else "loop")
        (after,) = explain(ep).decisions
        assert (after.op, after.lowered, after.algorithm) == ("ssd_scan_fwd", True, would)


def test_tensorrt_readiness_before_and_after():
    """The op is named as unconvertible; the parallel form (static, non-power-of-two L) holds only
    converter-set ops; the loop's ``scan`` is named as a higher-order op."""
    args = _inputs(37)
    ep = torch.export.export(Block(), args)
    assert "ssmscan.ssd_scan_fwd.default" in check_tensorrt_ready(ep).unsupported
    looped = torch.export.export(Block(), args)
    decompose_selective_scan(looped, "loop")
    assert check_tensorrt_ready(looped).higher_order == ("torch.ops.higher_order.scan",)
    report = ExportReport("tensorrt")
    lowered = lower_for_tensorrt(ep, "auto", report)
    readiness = check_tensorrt_ready(lowered)
    assert readiness.ready, readiness
    assert any("ssd_scan_fwd" in note and "lowered (chunked)" in note for note in report.notes)
    _check_numerics(lowered.module()(*args), args)


@pytest.mark.parametrize(
    ("pipeline", "realization", "dynamic"),
    [(PARALLEL_REALIZATION_PIPELINE, "parallel", False), (LOOP_REALIZATION_PIPELINE, "loop", True)],
    ids=["parallel-static", "loop-dynamic"],
)
def test_pipelines_leave_no_ssmscan_op(pipeline, realization, dynamic):
    ep = torch.export.export(
        Block(), _inputs(37), dynamic_shapes=_dynamic_shapes() if dynamic else None
    )
    result = run_pipeline(ep, pipeline)
    assert result.changed and any(d.op == "ssd_scan_fwd" and d.lowered for d in result.decisions)
    _assert_realized(ep.graph_module, realization)
    args = _inputs(63 if dynamic else 37, seed=1)
    _check_numerics(ep.module()(*args), args)


def _onnx_session(ep, args, tmp_path, name):
    ort = pytest.importorskip("onnxruntime", reason="the onnx extra is not installed")
    pytest.importorskip("onnxscript", reason="the onnx extra is not installed")
    path = tmp_path / f"{name}.onnx"
    torch.onnx.export(ep, args, dynamo=True, verbose=False).save(str(path))
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def _feeds(session, args):
    return {i.name: x.numpy() for i, x in zip(session.get_inputs(), args, strict=True)}


@pytest.mark.onnx
@pytest.mark.slow
def test_onnx_runs_both_realizations(tmp_path):
    """The parallel form at a static length and the loop at a dynamic length (an ONNX ``Scan``)
    export with the dynamo exporter and run in ONNX Runtime."""
    args = _inputs(37)
    ep = torch.export.export(Block(), args)
    decompose_selective_scan(ep, "parallel")
    session = _onnx_session(ep, args, tmp_path, "parallel")
    got = [torch.from_numpy(g) for g in session.run(None, _feeds(session, args))]
    _check_numerics(got, args)

    ep = torch.export.export(Block(), _inputs(16), dynamic_shapes=_dynamic_shapes())
    decompose_selective_scan(ep, "loop")
    session = _onnx_session(ep, _inputs(16), tmp_path, "loop")
    for L in (2, 63, 257):
        args = _inputs(L, seed=L)
        got = [torch.from_numpy(g) for g in session.run(None, _feeds(session, args))]
        _check_numerics(got, args)


@pytest.mark.tensorrt
def test_dry_run_puts_every_op_in_tensorrt(torch_tensorrt):
    """Torch-TensorRT's own lowering and partitioner (no engine built) at a non-power-of-two
    length: one TensorRT engine, no PyTorch block."""
    from ssmscan.export.tensorrt import tensorrt_dry_run

    args = _inputs(37)
    result = tensorrt_dry_run(Block().eval(), args)
    assert result.all_in_tensorrt, (result.unsupported, result.engines, result.torch_blocks)
    assert result.readiness.ready, result.readiness
    _check_numerics(result.graph(*args), args)


@pytest.mark.tensorrt
def test_registered_pass_alone_lowers_inside_torch_tensorrt(torch_tensorrt):
    """``ssd_scan_fwd`` handed to Torch-TensorRT as is: ssmscan's registered post-lowering pass
    replaces it by the parallel form there."""
    from ssmscan.export.tensorrt import tensorrt_dry_run

    args = _inputs(37)
    result = tensorrt_dry_run(Block().eval(), args, lower_first=False)
    assert result.all_in_tensorrt, (result.unsupported, result.engines, result.torch_blocks)
    _check_numerics(result.graph(*args), args)
