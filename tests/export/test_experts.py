"""transformers' mixture-of-experts ops as plain aten (``ssmscan.export._experts``): CPU
``histc``'s exact counts, the grouped product of ``grouped_mm_fallback`` (empty groups and rows
past the last offset included), graphs without those ops untouched, and transformers'
GraniteMoeHybrid MoE block exported to ONNX (run in a fresh process without ssmscan), ExecuTorch
and Torch-TensorRT's partitioner against eager."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch.export import Dim

import ssmscan
from ssmscan.export._experts import (
    decompose_experts,
    empty_like_as_zeros,
    grouped_mm_dense,
    histc_by_comparison,
    sort_as_topk,
    split_as_slices,
)
from ssmscan.testing import rel_error, tolerance

TOL = tolerance(torch.float32)
HIDDEN = 32  # the tiny GraniteMoeHybrid config's hidden size


def _has(*modules: str) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in modules)


needs_transformers = pytest.mark.skipif(not _has("transformers"), reason="needs transformers")
needs_onnx = pytest.mark.skipif(
    not _has("onnx", "onnxscript", "onnxruntime"), reason="needs the onnx extra"
)
needs_executorch = pytest.mark.skipif(not _has("executorch"), reason="needs executorch")


def _ops(ep: torch.export.ExportedProgram) -> set[str]:
    return {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}


# ---------------------------------------------------------------------------------------------
# histc


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize(
    ("bins", "lo", "hi"),
    [(4, 0, 3), (1, -1.0, 2.5), (7, -2.3, 5.1), (64, 0, 63), (13, 0.1, 0.7)],
    ids=["experts4-0-3", "bins1", "bins7-fractional", "experts64-0-63", "bins13-narrow"],
)
def test_histc_by_comparison_equals_histc(bins, lo, hi, dtype):
    g = torch.Generator().manual_seed(bins)
    x = (torch.randn(257, generator=g) * 4).to(dtype)
    ids = torch.randint(-1, bins + 1, (63,), generator=g).to(dtype)  # integer ids, out of range too
    edges = torch.linspace(lo, hi, bins + 1, dtype=dtype)  # every bin edge, min and max included
    special = torch.tensor([float("nan"), float("inf"), -float("inf")], dtype=dtype)
    x = torch.cat([x, ids, edges, special]).reshape(1, -1)  # histc flattens any shape
    want = torch.histc(x, bins, lo, hi)
    got = histc_by_comparison(x, bins, lo, hi)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert torch.equal(got, want), (got, want)


def test_histc_by_comparison_rejects_bad_arguments():
    with pytest.raises(TypeError, match="x must be a floating tensor"):
        histc_by_comparison(torch.tensor([1, 2]), 2, 0, 1)
    with pytest.raises(ValueError, match="bins must be a positive int"):
        histc_by_comparison(torch.randn(3), 0, 0, 1)
    with pytest.raises(ValueError, match="need lo < hi"):
        histc_by_comparison(torch.randn(3), 2, 1.0, 1.0)


# ---------------------------------------------------------------------------------------------
# grouped_mm_fallback


@needs_transformers
@pytest.mark.parametrize(
    ("rows", "groups", "counts"),
    [
        (9, 4, [2, 0, 5, 2]),  # an empty group
        (9, 3, [0, 0, 6]),  # empty leading groups, three rows past the last offset
        (1, 1, [1]),
        (63, 8, None),  # random counts
    ],
    ids=["S9-G4-empty-group", "S9-G3-tail-rows", "S1-G1", "S63-G8-random"],
)
def test_grouped_mm_dense_equals_transformers_fallback(rows, groups, counts):
    import transformers.integrations.moe  # noqa: F401  (registers transformers::grouped_mm_fallback)

    g = torch.Generator().manual_seed(rows * groups)
    x = torch.randn(rows, 16, generator=g)
    w = torch.randn(groups, 16, 8, generator=g).transpose(1, 2).contiguous().transpose(1, 2)
    if counts is None:
        ids = torch.randint(0, groups, (rows,), generator=g)
        counts = torch.bincount(ids, minlength=groups).tolist()
    offs = torch.tensor(counts).cumsum(0).to(torch.int32)
    want = torch.ops.transformers.grouped_mm_fallback(x, w, offs)
    got = grouped_mm_dense(x, w, offs)
    assert rel_error(got, want) <= TOL
    tail = int(offs[-1])
    assert bool((got[tail:] == 0).all()), "rows past the last offset must be zero"


# ---------------------------------------------------------------------------------------------
# The pass


class _Counts(torch.nn.Module):
    def __init__(self, lo: float, hi: float) -> None:
        super().__init__()
        self.lo, self.hi = lo, hi

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return torch.histc(ids.float(), bins=4, min=self.lo, max=self.hi)


def test_decompose_experts_replaces_histc_with_literal_bounds():
    ids = torch.tensor([0, 3, 3, 1, 2, 3])
    ep = torch.export.export(_Counts(0, 3), (ids,), dynamic_shapes=({0: Dim("n")},))
    res = decompose_experts(ep)
    assert res.changed and res.decisions[0].lowered
    assert "aten.histc.default" not in _ops(ep)
    for x in (ids, torch.tensor([1]), torch.randint(0, 4, (50,))):
        assert torch.equal(ep.module()(x), torch.histc(x.float(), 4, 0, 3))


def test_decompose_experts_leaves_other_graphs_alone():
    ids = torch.tensor([0, 3, 3, 1])
    ep = torch.export.export(_Counts(0, 0), (ids,))  # min == max: the range comes from the data
    code = ep.graph_module.code
    res = decompose_experts(ep)
    assert not res.changed and not res.decisions[0].lowered
    assert "from the data" in res.decisions[0].reason
    assert ep.graph_module.code == code

    ep = torch.export.export(torch.nn.Linear(4, 3), (torch.randn(2, 4),))
    code = ep.graph_module.code
    res = decompose_experts(ep)
    assert not res.changed and res.decisions == ()
    assert ep.graph_module.code == code


def test_split_as_slices_keeps_a_dynamic_leading_size_through_executorch():
    to_edge = pytest.importorskip("executorch.exir", reason="needs executorch").to_edge

    class Gate(torch.nn.Module):
        def forward(self, x):
            gate, up = x.chunk(2, dim=-1)
            a, b, c = x.split([1, 2, 3], dim=1)
            return gate * up, a + b.sum(1, keepdim=True) + c[:, :1]

    x = torch.randn(9, 6)
    dynamic = ({0: Dim("n", min=2, max=64)},)
    ep = torch.export.export(Gate(), (x,), dynamic_shapes=dynamic)
    edge = to_edge(ep).exported_program()  # the validator specializes n without the rewrite
    assert [n.meta["val"].shape for n in edge.graph.nodes if n.op == "placeholder"] == [(9, 6)]

    ep = torch.export.export(Gate(), (x,))  # static: the validator reads the sizes as they are
    code = ep.graph_module.code
    assert not split_as_slices(ep).changed and ep.graph_module.code == code

    ep = torch.export.export(Gate(), (x,), dynamic_shapes=dynamic)
    res = split_as_slices(ep)
    assert res.changed and len(res.decisions) == 2 and all(d.lowered for d in res.decisions)
    for y in (x, torch.randn(2, 6), torch.randn(40, 6)):
        for got, want in zip(ep.module()(y), Gate()(y), strict=True):
            assert torch.equal(got, want)
    edge = to_edge(ep).exported_program()
    (placeholder,) = [n for n in edge.graph.nodes if n.op == "placeholder"]
    assert isinstance(placeholder.meta["val"].shape[0], torch.SymInt)


def test_executorch_rewrites_keep_the_values_and_a_dynamic_size():
    """sort -> topk and empty_like -> zeros_like: same results; after ExecuTorch's ``to_edge``
    the size stays symbolic and no op outside Core ATen remains."""
    to_edge = pytest.importorskip("executorch.exir", reason="needs executorch").to_edge

    class Inverse(torch.nn.Module):
        def forward(self, x):
            values, perm = torch.sort(x)
            inv = torch.empty_like(perm)
            inv[perm] = torch.arange(perm.shape[0])
            return values, inv

    x = torch.randint(0, 4, (9,))  # ties: the order among equal values is the sort's own
    ep = torch.export.export(Inverse(), (x,), dynamic_shapes=({0: Dim("n", min=2, max=64)},))
    assert sort_as_topk(ep).changed and empty_like_as_zeros(ep).changed
    assert {"aten.sort.default", "aten.empty_like.default"}.isdisjoint(_ops(ep))
    for y in (x, torch.randint(0, 4, (2,)), torch.randn(40)):
        values, inv = ep.module()(y)
        assert torch.equal(values, torch.sort(y).values)
        assert torch.equal(values[inv], y)  # inv inverts a permutation that sorts y
    edge = to_edge(ep).exported_program()
    (placeholder,) = [n for n in edge.graph.nodes if n.op == "placeholder"]
    assert isinstance(placeholder.meta["val"].shape[0], torch.SymInt)


# ---------------------------------------------------------------------------------------------
# transformers' MoE block through the targets


def _moe_block() -> torch.nn.Module:
    """GraniteMoeHybrid's MoE block (router top-2 of 4 experts, grouped_mm experts) of the tiny
    config, seeded weights large enough that the routing varies between tokens."""
    from transformers.models.granitemoehybrid.modeling_granitemoehybrid import (
        GraniteMoeHybridMoE,
    )

    from ssmscan._cli_hf_models import build_hf_tiny

    overrides = dict(num_local_experts=4, num_experts_per_tok=2)
    config = build_hf_tiny("granitemoehybrid", config_overrides=overrides).config
    assert (
        config._experts_implementation == "grouped_mm"
    )  # transformers' default: histc, grouped mm
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        block = GraniteMoeHybridMoE(config).eval()
        for p in block.parameters():
            torch.nn.init.normal_(p, std=0.3)
    return block


SHAPES = [(1, 9), (2, 13), (1, 64)]


def _inputs(shapes=SHAPES) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(5)
    return [torch.randn(*s, HIDDEN, generator=g) for s in shapes]


def _check(run, block, xs):
    for x in xs:
        with torch.no_grad():
            want = block(x)
        got = run(x)
        assert got.shape == want.shape, (tuple(x.shape), got.shape)
        err = rel_error(got, want)
        assert err <= TOL, f"{tuple(x.shape)}: {err:.2e}"


FRESH = textwrap.dedent(
    """
    import sys
    sys.modules["ssmscan"] = None  # import ssmscan -> ImportError
    sys.modules["transformers"] = None
    import numpy as np
    import onnxruntime as ort
    path, data = sys.argv[1:3]
    arrays = np.load(data)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    outs = [sess.run(None, {name: arrays[k]})[0] for k in sorted(arrays.files)]
    np.savez(data.replace(".npz", "_out.npz"), *outs)
    print("FRESH_OK")
    """
)


@needs_transformers
@needs_onnx
@pytest.mark.onnx
def test_moe_block_onnx_matches_eager_in_a_fresh_process(tmp_path):
    import numpy as np

    block = _moe_block()
    xs = _inputs()
    path = str(tmp_path / "moe.onnx")
    res = ssmscan.export(block, (xs[0],), "onnx", ({1: Dim("L", min=2, max=64)},), path=path)
    assert not res.report.leftover_ops
    assert any("histc" in n and "lowered" in n for n in res.report.notes), res.report.notes
    _check(lambda x: res.run(x)[0], block, xs)

    data = str(tmp_path / "in.npz")
    np.savez(data, **{f"x{i}": x.numpy() for i, x in enumerate(xs)})
    script = tmp_path / "fresh.py"
    script.write_text(FRESH)
    proc = subprocess.run(
        [sys.executable, "-I", str(script), path, data],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert proc.returncode == 0 and "FRESH_OK" in proc.stdout, proc.stderr[-3000:]
    outs = np.load(data.replace(".npz", "_out.npz"))
    fresh = iter(torch.from_numpy(outs[f"arr_{i}"]) for i in range(len(xs)))
    _check(lambda x: next(fresh), block, xs)


@needs_transformers
@needs_executorch
@pytest.mark.slow
def test_moe_block_executorch_matches_eager():
    block = _moe_block()
    xs = _inputs([(1, 9), (1, 13), (1, 64)])  # the batch stays static for executorch
    res = ssmscan.export(block, (xs[0],), "executorch", ({1: Dim("L", min=2, max=64)},))
    notes = res.report.notes
    assert any("aten.sort" in n and "lowered" in n for n in notes), notes
    assert any("aten.empty_like" in n and "lowered" in n for n in notes), notes
    assert any("aten.chunk" in n and "lowered" in n for n in notes), notes
    _check(lambda x: res.run(x)[0], block, xs)


@needs_transformers
def test_moe_block_lowered_for_tensorrt_holds_only_converted_ops():
    """Against Torch-TensorRT 2.13's converter registry (no torch_tensorrt needed); before the
    experts' decomposition histc and grouped_mm_fallback have no converter."""
    from ssmscan.export._common import ExportReport
    from ssmscan.export.tensorrt import lower_for_tensorrt
    from ssmscan.passes import check_tensorrt_ready

    block = _moe_block()
    (x,) = _inputs([(2, 13)])
    ep = torch.export.export(block, (x,))
    before = check_tensorrt_ready(ep.run_decompositions())
    assert {"aten.histc.default", "transformers.grouped_mm_fallback.default"} <= set(
        before.unsupported
    ), before
    ep = lower_for_tensorrt(ep, "auto", ExportReport("tensorrt"))
    readiness = check_tensorrt_ready(ep)
    assert readiness.ready, readiness
    _check(lambda _: ep.module()(x), block, [x])


@needs_transformers
@pytest.mark.tensorrt
def test_moe_block_all_in_tensorrt(torch_tensorrt):
    from ssmscan.export._common import flat_outputs
    from ssmscan.export.tensorrt import tensorrt_dry_run

    block = _moe_block()
    (x,) = _inputs([(2, 13)])
    result = tensorrt_dry_run(block, (x,))
    assert result.all_in_tensorrt, (result.unsupported, result.engines, result.torch_blocks)
    assert result.readiness.ready, result.readiness
    _check(lambda _: flat_outputs(result.graph(x))[0], block, [x])


@needs_transformers
@needs_onnx
@pytest.mark.onnx
@pytest.mark.slow
def test_granitemoehybrid_tiny_onnx_logits_match_eager():
    """The whole tiny GraniteMoeHybrid LM (Mamba-2 mixers on ssmscan, attention, MoE layers)
    as ``ssmscan report --model hf-granitemoehybrid-tiny`` exports it."""
    from ssmscan._cli_hf_models import load_hf_tiny

    model = load_hf_tiny("hf-granitemoehybrid-tiny").module
    g = torch.Generator().manual_seed(7)
    ids = [torch.randint(0, 256, s, generator=g) for s in [(1, 9), (1, 64), (2, 23)]]
    dynamic = ({1: Dim("L", min=2, max=256)},)
    res = ssmscan.export(model, (ids[0],), "onnx", dynamic)
    assert set(res.report.leftover_ops) == {"higher_order.scan"}  # the Mamba-2 loops: ONNX Scan
    _check(lambda x: res.run(x)[0], model, ids)
