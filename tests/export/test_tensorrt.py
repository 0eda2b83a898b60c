"""Target "tensorrt": the graph Torch-TensorRT would convert holds only ops of its converter
registry, its partitioner (dry run) puts every op in one TensorRT engine, the pass registered in
its post-lowering list lowers ssmscan ops and scan HOPs itself, and the errors say what to do.

TensorRT's runtime libraries are not obtainable on the CPU CI machines (PyPI carries only
placeholder ``tensorrt`` packages), so ``torch_tensorrt`` is imported through
``tools/trt_shim.py`` there and the real engine build skips with that reason.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import ssmscan
from ssmscan.export import TargetUnavailable, export
from ssmscan.export._common import ExportReport, flat_outputs
from ssmscan.export.tensorrt import (
    NotTensorRTReady,
    fill_static_factories,
    lower_for_tensorrt,
    register_tensorrt_passes,
    ssmscan_lower_scans,
    tensorrt_dry_run,
)
from ssmscan.models import build_model
from ssmscan.passes import check_tensorrt_ready
from ssmscan.testing import assert_close_to_reference


class MambaStyleBlock(torch.nn.Module):
    """In-projection, causal depthwise conv1d, selective scan, SiLU gate, out-projection."""

    def __init__(self, d_model=16, d_inner=32, d_state=8, d_conv=4, dt_rank=4):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.in_proj = torch.nn.Linear(d_model, 2 * d_inner, bias=False)
        self.conv = torch.nn.Conv1d(d_inner, d_inner, d_conv, groups=d_inner, padding=d_conv - 1)
        self.x_proj = torch.nn.Linear(d_inner, dt_rank + 2 * d_state, bias=False)
        self.dt_proj = torch.nn.Linear(dt_rank, d_inner)
        self.out_proj = torch.nn.Linear(d_inner, d_model, bias=False)
        a = torch.arange(1, d_state + 1, dtype=torch.float32).repeat(d_inner, 1)
        self.A_log = torch.nn.Parameter(torch.log(a))
        self.D = torch.nn.Parameter(torch.rand(d_inner, generator=g))
        self.dims = (d_inner, d_state, dt_rank)

    def forward(self, x):  # x (batch, L, d_model)
        _, d_state, dt_rank = self.dims
        L = x.shape[1]
        u, z = self.in_proj(x).transpose(1, 2).chunk(2, dim=1)
        u = F.silu(self.conv(u)[..., :L])
        dt, B, C = self.x_proj(u.transpose(1, 2)).split([dt_rank, d_state, d_state], dim=-1)
        delta = (dt @ self.dt_proj.weight.t()).transpose(1, 2)
        y = ssmscan.selective_scan(
            u,
            delta,
            -torch.exp(self.A_log),
            B.transpose(1, 2),
            C.transpose(1, 2),
            self.D,
            z,
            self.dt_proj.bias,
            delta_softplus=True,
        )
        return self.out_proj(y.transpose(1, 2))


def _block(L):
    torch.manual_seed(L)
    return MambaStyleBlock().eval(), (torch.randn(2, L, 16),)


def _tiny(L):
    torch.manual_seed(L)
    return build_model("tiny").eval(), (torch.randint(0, 256, (1, L)),)


MODELS = {"tiny": _tiny, "block": _block}


def _check_against_eager(outputs, model, inputs):
    with torch.no_grad():
        expected = flat_outputs(model(*inputs))
    assert len(outputs) == len(expected)
    for i, (got, ref) in enumerate(zip(outputs, expected, strict=True)):
        assert_close_to_reference(f"output {i}", got, ref, torch.float32)


# ---------------------------------------------------------------------------------------------
# Without torch_tensorrt: ssmscan's own lowering and the registry check


@pytest.mark.parametrize(
    ("name", "L"),
    [("tiny", 63), ("block", 1), ("block", 63), ("block", 1000)],
    ids=["tiny-L63", "block-L1", "block-L63", "block-L1000"],
)
def test_lowered_graph_holds_only_registry_ops(name, L):
    model, inputs = MODELS[name](L)
    report = ExportReport("tensorrt")
    ep = lower_for_tensorrt(torch.export.export(model, inputs), "auto", report)
    readiness = check_tensorrt_ready(ep)
    assert readiness.ready, readiness
    assert not any(str(n.target).startswith("ssmscan") for n in ep.graph.nodes)
    assert any("lowered (" in note for note in report.notes)
    _check_against_eager(flat_outputs(ep.module()(*inputs)), model, inputs)


def test_dynamic_length_raises_naming_onnx_and_aoti():
    model, inputs = _block(7)
    dynamic = ({1: torch.export.Dim("L", min=2, max=4096)},)
    with pytest.raises(ValueError, match="static shapes") as info:
        export(model, inputs, target="tensorrt", dynamic_shapes=dynamic)
    assert "onnx" in str(info.value) and "aoti" in str(info.value)
    with pytest.raises(ValueError, match="realization='parallel'"):
        export(model, inputs, target="tensorrt", realization="loop")


class _Kth(torch.nn.Module):
    def forward(self, x):
        return torch.kthvalue(x, 2).values


def test_not_ready_graph_raises_listing_the_ops():
    with pytest.raises(NotTensorRTReady, match=r"aten\.kthvalue") as info:
        export(_Kth(), (torch.randn(3, 5),), target="tensorrt")
    assert "onnx" in str(info.value)


def test_build_says_what_is_missing_where_tensorrt_is_absent():
    model, inputs = _block(63)
    try:
        res = export(model, inputs, target="tensorrt")
    except TargetUnavailable as e:
        msg = str(e)
        assert "check_tensorrt_ready: ready" in msg
        assert "TensorRT" in msg and "tensorrt_dry_run" in msg
    else:  # a machine with TensorRT and a GPU: the engine must match eager
        _check_against_eager(res.run(*inputs), model, inputs)


class MaskedAttention(torch.nn.Module):
    """Attention as transformers' hybrids run it: a causal boolean mask built from ``arange`` and
    ``new_ones``, then ``scaled_dot_product_attention`` (whose math decomposition gives
    ``_safe_softmax``: ``where(all_masked, zeros_like(p), p)``)."""

    def __init__(self, dim=8, heads=2):
        super().__init__()
        torch.manual_seed(0)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.heads = heads

    def forward(self, x):  # x (batch, L, dim)
        b, L, d = x.shape
        q, k, v = self.qkv(x).view(b, L, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        pos = torch.arange(L, device=x.device)
        keep = x.new_ones((b, L), dtype=torch.bool)[:, None, None, :]
        mask = (pos[None, :] <= pos[:, None])[None, None] & keep
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.parametrize("L", [1, 63, 1000], ids=["L1", "L63", "L1000"])
def test_attention_mask_factories_become_full(L):
    torch.manual_seed(L)
    model, inputs = MaskedAttention().eval(), (torch.randn(1, L, 8),)
    ep = torch.export.export(model, inputs)
    before = ep.run_decompositions()
    assert "aten.full_like.default" in {str(n.target) for n in before.graph.nodes}
    expected = before.module()(*inputs)
    report = ExportReport("tensorrt")
    ep = lower_for_tensorrt(ep, "auto", report)
    targets = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    assert "aten.full_like.default" not in targets and "aten.full.default" in targets
    assert check_tensorrt_ready(ep).ready, check_tensorrt_ready(ep)
    assert any("aten.full_like.default x1" in note for note in report.notes), report.notes
    assert torch.equal(ep.module()(*inputs), expected)  # the same ops on the same values
    _check_against_eager(flat_outputs(ep.module()(*inputs)), model, inputs)


class _Factories(torch.nn.Module):
    def __init__(self, factory):
        super().__init__()
        self.factory = factory

    def forward(self, x):
        return x * 2 + self.factory(x)


FACTORIES = {
    "full_like": (lambda x: torch.full_like(x, -1.5), "aten.full_like.default"),
    "zeros_like": (torch.zeros_like, "aten.zeros_like.default"),
    "ones_like": (torch.ones_like, "aten.ones_like.default"),
    "new_full": (lambda x: x.new_full((3, 5), 7), "aten.new_full.default"),
    "new_zeros": (lambda x: x.new_zeros(3, 5), "aten.new_zeros.default"),
    "new_ones": (lambda x: x.new_ones(3, 5), "aten.new_ones.default"),
    "int-fill": (lambda x: torch.full_like(x, 2, dtype=torch.int32), "aten.full_like.default"),
}


@pytest.mark.parametrize("name", list(FACTORIES))
def test_each_factory_becomes_full_with_the_same_values(name):
    factory, op = FACTORIES[name]
    model, x = _Factories(factory), torch.randn(3, 5)
    ep = torch.export.export(model, (x,))
    assert op in {str(n.target) for n in ep.graph.nodes}
    assert fill_static_factories(ep.graph_module) == {op: 1}
    targets = [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]
    assert op not in targets and "aten.full.default" in targets
    got = ep.module()(x)
    want = model(x)
    assert got.dtype == want.dtype and torch.equal(got, want)


class _Transposed(torch.nn.Module):
    def forward(self, x):
        return torch.full_like(x.t(), 3.0).sum(0)  # preserve_format: a transposed output


class _Computed(torch.nn.Module):
    def forward(self, x, y):
        return y + torch.full_like(y, x.shape[1])  # y static, the fill a symbolic size of x


@pytest.mark.parametrize(
    ("model", "dynamic"),
    [(_Factories(torch.zeros_like), True), (_Transposed(), False), (_Computed(), True)],
    ids=["dynamic-shape", "non-contiguous", "computed-fill"],
)
def test_fill_rewrite_leaves_what_it_cannot_keep_the_same(model, dynamic):
    inputs = (torch.randn(3, 5),) if not isinstance(model, _Computed) else (torch.randn(3, 5),) * 2
    L = torch.export.Dim("L", min=2, max=64)
    shapes = None if not dynamic else ({1: L},) + (None,) * (len(inputs) - 1)
    ep = torch.export.export(model, inputs, dynamic_shapes=shapes)
    code = ep.graph_module.code
    assert fill_static_factories(ep.graph_module) == {}
    assert ep.graph_module.code == code


# ---------------------------------------------------------------------------------------------
# With torch_tensorrt (the shim where TensorRT's libraries are absent)


@pytest.mark.tensorrt
@pytest.mark.parametrize(
    ("name", "L"), [("tiny", 37), ("block", 1000)], ids=["tiny-L37", "block-L1000"]
)
def test_dry_run_puts_every_op_in_tensorrt(torch_tensorrt, name, L):
    model, inputs = MODELS[name](L)
    result = tensorrt_dry_run(model, inputs)
    assert result.all_in_tensorrt, (result.unsupported, result.engines, result.torch_blocks)
    assert result.readiness.ready, result.readiness  # converters only, nothing left to decompose
    assert result.supported and not result.report.leftover_ops
    _check_against_eager(flat_outputs(result.graph(*inputs)), model, inputs)


@pytest.mark.tensorrt
def test_registered_pass_alone_lowers_inside_torch_tensorrt(torch_tensorrt):
    from torch_tensorrt.dynamo.lowering.passes._aten_lowering_pass import (
        ATEN_POST_LOWERING_PASSES,
    )

    register_tensorrt_passes()
    assert register_tensorrt_passes() is False  # idempotent
    assert sum(p is ssmscan_lower_scans for p in ATEN_POST_LOWERING_PASSES.passes) == 1
    model, inputs = _block(63)
    result = tensorrt_dry_run(model, inputs, lower_first=False)  # ssmscan ops handed over as-is
    assert result.all_in_tensorrt, (result.unsupported, result.engines, result.torch_blocks)
    _check_against_eager(flat_outputs(result.graph(*inputs)), model, inputs)


@pytest.mark.tensorrt
def test_registered_pass_on_a_graph_module_with_an_ssmscan_op(torch_tensorrt):
    from torch_tensorrt.dynamo.lowering import get_decompositions

    model, inputs = _block(63)  # what Torch-TensorRT hands its post-lowering passes:
    gm = torch.export.export(model, inputs).run_decompositions(get_decompositions()).module()
    assert any(str(n.target).startswith("ssmscan.") for n in gm.graph.nodes)
    gm = ssmscan_lower_scans(gm, None)
    targets = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    assert not any(t.startswith("ssmscan.") for t in targets)
    assert "aten.silu.default" not in targets  # decomposed with Torch-TensorRT's own table
    assert check_tensorrt_ready(gm, allow_decomposed=False).ready
    _check_against_eager(flat_outputs(gm(*inputs)), model, inputs)


@pytest.mark.tensorrt
def test_registered_pass_lowers_an_associative_scan_hop(torch_tensorrt):
    from hop_graphs import export as export_hop
    from torch_tensorrt.dynamo.lowering import get_decompositions

    from ssmscan.testing.scan_oracle import affine

    xs = [0.5 + 0.5 * torch.rand(3, 37), torch.randn(3, 37)]
    ep = export_hop("direct", affine, xs, dim=1).run_decompositions(get_decompositions())
    assert any(n.target is torch.ops.higher_order.associative_scan for n in ep.graph.nodes)
    gm = ep.module()
    expected = gm(*xs)
    gm = ssmscan_lower_scans(gm, None)
    assert check_tensorrt_ready(gm, allow_decomposed=False).ready
    for got, ref in zip(gm(*xs), expected, strict=True):
        assert_close_to_reference("scan", got, ref, torch.float32)


def _tensorrt_runtime_missing() -> str | None:
    from ssmscan.export.tensorrt import _require_tensorrt_runtime

    try:
        _require_tensorrt_runtime("probe")
    except TargetUnavailable as e:
        return str(e).split("missing: ", 1)[1].split(". PyPI", 1)[0]
    return None


@pytest.mark.tensorrt
@pytest.mark.gpu
def test_engine_matches_eager():
    missing = _tensorrt_runtime_missing()
    if missing is not None:
        pytest.skip(f"no TensorRT engine build here: missing {missing}")
    model, inputs = _block(63)
    model, inputs = model.cuda(), tuple(x.cuda() for x in inputs)
    res = export(model, inputs, target="tensorrt")
    assert res.path is not None and res.report.artifact_bytes
    _check_against_eager(res.run(*inputs), model, inputs)
