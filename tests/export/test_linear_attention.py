"""``ssmscan.export(..., target="onnx", onnx_linear_attention=True)``: each SSD scan becomes one
ONNX opset-27 ``LinearAttention`` node that ONNX Runtime runs; outputs and final states match the
float64 reference at every length of one dynamic-length model; what the operator cannot express
is declined with a clear error."""

from __future__ import annotations

import pytest
import torch
from torch.export import Dim

import ssmscan
from ssmscan.ops.ssd_scan.reference import ssd_scan_reference
from ssmscan.testing import assert_close_to_reference

pytestmark = pytest.mark.onnx
onnx = pytest.importorskip("onnx", reason="needs the onnx extra")
pytest.importorskip("onnxruntime", reason="needs the onnx extra")
pytest.importorskip("onnxscript", reason="needs the onnx extra")


class SSD(torch.nn.Module):
    """``ssmscan.ssd_scan`` with parameters A, D, dt_bias; returns (out, final_states)."""

    def __init__(self, nheads, headdim, D_2d, dt_softplus, dt_limit, chunk_size=None):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.A = torch.nn.Parameter(-torch.rand(nheads, generator=g) - 0.2)
        shape = (nheads, headdim) if D_2d else (nheads,)
        self.D = torch.nn.Parameter(torch.randn(shape, generator=g))
        self.dt_bias = torch.nn.Parameter(torch.randn(nheads, generator=g) * 0.5 - 2.0)
        self.dt_softplus, self.dt_limit, self.chunk_size = dt_softplus, dt_limit, chunk_size

    def kwargs(self):
        return dict(
            D=self.D, dt_bias=self.dt_bias, dt_softplus=self.dt_softplus, dt_limit=self.dt_limit
        )

    def forward(self, x, dt, B, C, z, h0):
        return ssmscan.ssd_scan(
            x, dt, self.A, B, C, self.chunk_size, z=z, initial_states=h0,
            return_final_states=True, **self.kwargs(),
        )  # fmt: skip


def _inputs(batch, L, nheads, headdim, ngroups, dstate, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, L, nheads, headdim, generator=g)
    dt = torch.randn(batch, L, nheads, generator=g)
    B = torch.randn(batch, L, ngroups, dstate, generator=g)
    C = torch.randn(batch, L, ngroups, dstate, generator=g)
    z = torch.randn(batch, L, nheads, headdim, generator=g)
    h0 = torch.randn(batch, nheads, headdim, dstate, generator=g)
    return x, dt, B, C, z, h0


BATCH, LENGTH = Dim("batch", min=1), Dim("L", min=1, max=4096)
# x, dt, B, C, z: dynamic length (ssmscan.export adds the dynamic batch); h0: static
DYNAMIC = ({1: LENGTH},) * 5 + (None,)

# (nheads, headdim, ngroups, dstate, D (nheads, headdim)?, softplus, dt_limit, chunk_size)
CASES = {
    "H4-P8-G2-N8-D2d-softplus": (4, 8, 2, 8, True, True, (0.0, float("inf")), None),
    "H6-P4-G1-N16-D1d-limit": (6, 4, 1, 16, False, False, (0.01, 0.5), 16),
}


@pytest.mark.parametrize(
    "case",
    [pytest.param(c, marks=pytest.mark.slow) if "limit" in c else c for c in CASES],
)
def test_linear_attention_runs_in_onnxruntime_and_matches_float64(case, tmp_path):
    nheads, headdim, ngroups, dstate, D_2d, softplus, limit, Q = CASES[case]
    model = SSD(nheads, headdim, D_2d, softplus, limit, Q).eval()
    example = _inputs(1, 9, nheads, headdim, ngroups, dstate, seed=0)
    res = ssmscan.export(
        model,
        example,
        target="onnx",
        dynamic_shapes=DYNAMIC,
        path=str(tmp_path / "ssd.onnx"),
        onnx_linear_attention=True,
    )
    proto = onnx.load(res.path)
    ops = [n.op_type for n in proto.graph.node]
    assert ops.count("LinearAttention") == 1 and "Scan" not in ops, ops
    assert {o.domain: o.version for o in proto.opset_import} == {"": 27}
    la = next(n for n in proto.graph.node if n.op_type == "LinearAttention")
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in la.attribute}
    assert attrs["update_rule"] == b"gated" and attrs["q_num_heads"] == nheads
    assert any("LinearAttention" in note for note in res.report.notes), res.report.notes
    for batch, L in [(2, 1), (1, 63), (2, 1000)]:
        x, dt, B, C, z, h0 = _inputs(batch, L, nheads, headdim, ngroups, dstate, seed=L)
        out, last = res.run(x, dt, B, C, z, h0)
        with torch.no_grad():
            kw = {k: v.double() if torch.is_tensor(v) else v for k, v in model.kwargs().items()}
            want, want_last = ssd_scan_reference(
                x.double(), dt.double(), model.A.double(), B.double(), C.double(),
                z=z.double(), initial_states=h0.double(), return_final_states=True, **kw,
            )  # fmt: skip
        assert_close_to_reference(f"out L={L}", out, want, torch.float32)
        assert_close_to_reference(f"final state L={L}", last, want_last, torch.float32)


def test_rewritten_program_runs_in_torch():
    """The rewrite alone (aten ops around ``ssmscan::onnx_linear_attention``) matches eager."""
    from ssmscan.export._linear_attention import rewrite_ssd_scan

    model = SSD(4, 8, True, True, (0.0, float("inf"))).eval()
    example = _inputs(2, 9, 4, 8, 2, 8, seed=0)
    dims = ({0: BATCH, 1: LENGTH},) * 5 + ({0: BATCH},)
    ep = torch.export.export(model, example, dynamic_shapes=dims)
    with torch.no_grad():
        notes = rewrite_ssd_scan(ep)
    targets = [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]
    assert len(notes) == 1 and not any("ssd_scan_fwd" in t for t in targets), targets
    assert sum("onnx_linear_attention" in t for t in targets) == 1, targets
    inputs = _inputs(3, 33, 4, 8, 2, 8, seed=5)
    with torch.no_grad():
        got, want = ep.module()(*inputs), model(*inputs)
    for name, a, b in zip(("out", "final state"), got, want, strict=True):
        assert_close_to_reference(name, a, b, torch.float32)


class Packed(torch.nn.Module):
    def forward(self, x, dt, A, B, C, seq_idx):
        return ssmscan.ssd_scan(x, dt, A, B, C, seq_idx=seq_idx)


class Plain(torch.nn.Module):
    def forward(self, x, dt, A, B, C):
        return ssmscan.ssd_scan(x, dt, A, B, C)


def _plain_inputs(dtype=torch.float32):
    x, dt, B, C, _, _ = _inputs(1, 8, 2, 4, 1, 4, seed=0)
    return tuple(t.to(dtype) for t in (x, dt.abs(), -torch.rand(2), B, C))


def test_declines_seq_idx_naming_it():
    seq_idx = torch.tensor([[0, 0, 0, 1, 1, 1, 2, 2]])
    with pytest.raises(ValueError, match=r"seq_idx.*onnx_linear_attention=False"):
        ssmscan.export(
            Packed(),
            (*_plain_inputs(), seq_idx),
            target="onnx",
            onnx_linear_attention=True,
            dynamic_batch=False,
        )


def test_declines_float64_naming_the_dtypes():
    with pytest.raises(ValueError, match=r"torch.float64.*float32"):
        ssmscan.export(
            Plain(),
            _plain_inputs(torch.float64),
            target="onnx",
            onnx_linear_attention=True,
            dynamic_batch=False,
        )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"target": "aoti"}, "applies to target 'onnx'"),
        ({"target": "onnx", "opset": 18}, "opset >= 27"),
    ],
    ids=["target-aoti", "opset-18"],
)
def test_rejects_what_cannot_carry_linear_attention(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ssmscan.export(
            Plain(), _plain_inputs(), onnx_linear_attention=True, dynamic_batch=False, **kwargs
        )


def test_model_without_ssd_scan_is_an_error():
    with pytest.raises(ValueError, match="no ssd_scan node"):
        ssmscan.export(
            torch.nn.Linear(4, 3),
            (torch.randn(2, 4),),
            target="onnx",
            onnx_linear_attention=True,
            dynamic_batch=False,
        )
