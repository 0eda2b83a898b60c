"""decompose_selective_scan: ssmscan ops in exported programs and graph modules replaced by the
parallel or loop realization; what the graph holds afterwards, numerics against the float64
reference, declines that leave the graph unchanged, and the artifacts (ONNX, AOTInductor)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch
from torch._higher_order_ops.scan import scan_op
from torch.fx.experimental.proxy_tensor import make_fx

import ssmscan
from ssmscan.ops.linear_scan.reference import linear_scan_reference
from ssmscan.passes import check_tensorrt_ready, decompose_selective_scan, explain
from ssmscan.testing import assert_close_to_reference, make_selective_scan_inputs

NAMES = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias", "initial_state")
BANNED = ("ones_like", "zeros_like", "empty_like", "full_like", "new_")


class Block(torch.nn.Module):
    """A selective scan (every optional input) feeding a reverse linear scan."""

    def forward(self, u, delta, A, B, C, D, z, delta_bias, initial_state):
        out, last = ssmscan.selective_scan(
            u, delta, A, B, C, D, z, delta_bias, True, True, initial_state
        )
        return out, last, ssmscan.linear_scan(torch.sigmoid(u), out, dim=-1, reverse=True)


def _inputs(L, groups=2, dtype=torch.float32, seed=0):
    kw = make_selective_scan_inputs(
        2, 8, L, 4, groups=groups, dtype=dtype, has_initial_state=True, seed=seed
    )
    return tuple(kw[k] for k in NAMES)


def _reference(args):
    """float64 oracle of Block: the selective scan reference, then the linear scan reference."""
    a64 = [x.double() for x in args]
    out, last = ssmscan.selective_scan_reference(
        *a64[:8], delta_softplus=True, return_last_state=True, initial_state=a64[8]
    )
    h = linear_scan_reference(torch.sigmoid(a64[0]), out, -1, True)
    return out, last, h


def _check_numerics(outputs, args, dtype=torch.float32):
    for name, got, ref in zip(("out", "last_state", "h"), outputs, _reference(args), strict=True):
        assert_close_to_reference(name, got, ref, dtype)


def _dynamic_shapes():
    L = torch.export.Dim("L", min=1, max=1 << 16)
    return ({2: L}, {2: L}, None, {3: L}, {3: L}, None, {2: L}, None, None)


def _ssmscan_nodes(gm):
    return [n for n in gm.graph.nodes if n.op == "call_function" and "ssmscan" in str(n.target)]


def _hops(gm):
    return [
        n
        for n in gm.graph.nodes
        if n.op == "call_function" and isinstance(n.target, torch._ops.HigherOrderOperator)
    ]


def _assert_realized(ep, realization, L=None):
    gm = ep.graph_module
    assert not _ssmscan_nodes(gm)
    if realization == "parallel":
        assert not _hops(gm)
        targets = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
        assert not any(bad in t for t in targets for bad in BANNED), targets
    elif L == 1:  # a static single step is emitted without a loop (see run_scan)
        assert not _hops(gm)
    else:
        assert [n.target for n in _hops(gm)] == [scan_op, scan_op]


@pytest.mark.parametrize("realization", ["parallel", "loop"])
@pytest.mark.parametrize(
    ("L", "decomposed"),
    [
        pytest.param(L, dec, id=f"B2-D8-L{L}-N4-G2-fp32-{'decomposed' if dec else 'export'}")
        for L, dec in [(1, False), (7, False), (63, False), (63, True), (1000, False), (301, True)]
    ],
)
def test_replaces_every_op(realization, L, decomposed):
    args = _inputs(L)
    ep = torch.export.export(Block(), args)
    if decomposed:
        ep = ep.run_decompositions()
    assert len(_ssmscan_nodes(ep.graph_module)) == 2
    result = decompose_selective_scan(ep, realization)
    assert result.changed and all(d.lowered for d in result.decisions), result.decisions
    _assert_realized(ep, realization, L)
    for n in ep.graph.nodes:
        if n.op == "call_function" and n.target is not scan_op:
            assert isinstance(n.meta.get("val"), (torch.Tensor, list, tuple)), n
    _check_numerics(ep.module()(*args), args)


@pytest.mark.parametrize("realization", ["parallel", "loop"])
def test_program_validates_saves_loads_and_reexports(realization, tmp_path):
    args = _inputs(63, dtype=torch.bfloat16)
    ep = torch.export.export(Block(), args)
    decompose_selective_scan(ep, realization)
    ep.validate()
    expected = ep.module()(*args)
    _check_numerics(expected, args, torch.bfloat16)
    path = tmp_path / "prog.pt2"
    torch.export.save(ep, path)
    loaded = torch.export.load(path)
    _assert_realized(loaded, realization)
    again = torch.export.export(loaded.module(), args).run_decompositions()
    _assert_realized(again, realization)
    for prog in (loaded, again, ep.run_decompositions()):
        for got, want in zip(prog.module()(*args), expected, strict=True):
            torch.testing.assert_close(got, want)


def test_parallel_result_is_tensorrt_ready():
    args = _inputs(63)
    ep = torch.export.export(Block(), args)
    decompose_selective_scan(ep, "parallel", algorithm="blelloch")
    assert check_tensorrt_ready(ep.run_decompositions()).ready


@pytest.mark.parametrize("decomposed", [False, True], ids=["export", "decomposed"])
def test_loop_with_a_dynamic_length(decomposed):
    ep = torch.export.export(Block(), _inputs(16), dynamic_shapes=_dynamic_shapes())
    if decomposed:
        ep = ep.run_decompositions()
    assert decompose_selective_scan(ep, "loop").changed
    _assert_realized(ep, "loop")
    for L in (1, 7, 63, 300):
        args = _inputs(L, seed=L)
        _check_numerics(ep.module()(*args), args)


def test_parallel_declines_a_dynamic_length_naming_loop():
    ep = torch.export.export(Block(), _inputs(16), dynamic_shapes=_dynamic_shapes())
    before = ep.graph_module.code
    result = decompose_selective_scan(ep, "parallel")
    assert not result.changed and len(result.decisions) == 2
    assert all(not d.lowered and "loop" in d.reason for d in result.decisions)
    assert ep.graph_module.code == before


class ReadsCheckpoints(torch.nn.Module):
    def forward(self, u, delta, A, B, C):
        return torch.ops.ssmscan.selective_scan_fwd(
            u, delta, A, B, C, None, None, None, None, False
        )


@pytest.mark.parametrize("realization", ["parallel", "loop"])
def test_declines_when_the_checkpoints_are_read(realization):
    args = _inputs(33)[:5]
    ep = torch.export.export(ReadsCheckpoints(), args)
    before = ep.graph_module.code
    result = decompose_selective_scan(ep, realization)
    assert not result.changed
    (decision,) = result.decisions
    assert not decision.lowered and "checkpoints" in decision.reason
    assert ep.graph_module.code == before


@pytest.mark.parametrize("realization", ["parallel", "loop"])
def test_graph_module_from_make_fx(realization):
    args = _inputs(40, groups=None)
    gm = make_fx(Block(), tracing_mode="fake")(*args)
    assert decompose_selective_scan(gm, realization).changed
    assert not _ssmscan_nodes(gm)
    _check_numerics(gm(*args), args)


class StateUpdate(torch.nn.Module):
    def forward(self, state, x, dt, A, B, C, D, z, dt_bias):
        return torch.ops.ssmscan.selective_state_update(state, x, dt, A, B, C, D, z, dt_bias, True)


def test_selective_state_update_is_one_step():
    kw = make_selective_scan_inputs(2, 8, 1, 4, groups=2, has_initial_state=True)
    args = (
        kw["initial_state"],
        kw["u"][..., 0],
        kw["delta"][..., 0],
        kw["A"],
        kw["B"][..., 0],
        kw["C"][..., 0],
        kw["D"],
        kw["z"][..., 0],
        kw["delta_bias"],
    )
    ep = torch.export.export(StateUpdate(), args)
    expected = StateUpdate()(*args)
    assert decompose_selective_scan(ep, "loop").changed
    assert not _ssmscan_nodes(ep.graph_module) and not _hops(ep.graph_module)
    for got, want in zip(ep.module()(*args), expected, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_explain_before_and_after():
    ep = torch.export.export(Block(), _inputs(16), dynamic_shapes=_dynamic_shapes())
    before = explain(ep).decisions
    assert [d.op for d in before] == ["selective_scan_fwd", "linear_scan_fwd"]
    assert all(not d.lowered and d.algorithm == "loop" for d in before)
    decompose_selective_scan(ep, "loop")
    after = explain(ep).decisions
    assert [(d.op, d.lowered, d.algorithm) for d in after] == [
        ("selective_scan_fwd", True, "loop"),
        ("linear_scan_fwd", True, "loop"),
    ]


def test_rejects_an_unknown_realization():
    with pytest.raises(ValueError, match="realization"):
        decompose_selective_scan(torch.export.export(Block(), _inputs(4)), "triton")


def _onnx_run(ep, args, tmp_path, name):
    ort = pytest.importorskip("onnxruntime", reason="the onnx extra is not installed")
    pytest.importorskip("onnxscript", reason="the onnx extra is not installed")
    path = tmp_path / f"{name}.onnx"
    torch.onnx.export(ep, args, dynamo=True, verbose=False).save(str(path))
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session


def _feeds(session, args):
    return {i.name: x.numpy() for i, x in zip(session.get_inputs(), args, strict=True)}


@pytest.mark.onnx
def test_onnx_parallel_static_length(tmp_path):
    args = _inputs(63)
    ep = torch.export.export(Block(), args)
    decompose_selective_scan(ep, "parallel")
    session = _onnx_run(ep, args, tmp_path, "parallel")
    got = [torch.from_numpy(g) for g in session.run(None, _feeds(session, args))]
    _check_numerics(got, args)


@pytest.mark.onnx
def test_onnx_loop_dynamic_length(tmp_path):
    ep = torch.export.export(Block(), _inputs(16), dynamic_shapes=_dynamic_shapes())
    decompose_selective_scan(ep, "loop")
    session = _onnx_run(ep, _inputs(16), tmp_path, "loop")
    for L in (1, 7, 300):
        args = _inputs(L, seed=L)
        got = [torch.from_numpy(g) for g in session.run(None, _feeds(session, args))]
        for g, want in zip(got, ep.module()(*args), strict=True):
            torch.testing.assert_close(g, want, rtol=1e-5, atol=1e-5)
        _check_numerics(got, args)


_AOTI_RUNNER = textwrap.dedent(
    """
    import sys, torch
    package, data = sys.argv[1], torch.load(sys.argv[2])
    model = torch._inductor.aoti_load_package(package)
    for args, expected in data:
        for got, want in zip(model(*args), expected):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert "ssmscan" not in sys.modules, "the package must run without ssmscan"
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("realization", ["parallel", "loop"])
def test_aoti_package_runs_without_ssmscan(realization, tmp_path):
    """AOTInductor (CPU) compiles both realizations (the loop with a dynamic L) and the package
    runs in a fresh interpreter that never imports ssmscan."""
    dynamic = realization == "loop"
    ep = torch.export.export(
        Block(), _inputs(16), dynamic_shapes=_dynamic_shapes() if dynamic else None
    )
    decompose_selective_scan(ep, realization)
    package = torch._inductor.aoti_compile_and_package(ep, package_path=str(tmp_path / "m.pt2"))
    lengths = (1, 16, 300) if dynamic else (16,)
    data = []
    for L in lengths:
        args = _inputs(L, seed=L)
        data.append((args, tuple(ep.module()(*args))))
    torch.save(data, tmp_path / "io.pt")
    run = subprocess.run(
        [sys.executable, "-c", _AOTI_RUNNER, package, str(tmp_path / "io.pt")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
