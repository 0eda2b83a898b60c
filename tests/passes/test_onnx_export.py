import pytest
import torch
from hop_graphs import export

from ssmscan.passes import lower_associative_scan
from ssmscan.testing.scan_oracle import affine

ort = pytest.importorskip("onnxruntime", reason="the onnx extra is not installed")
pytest.importorskip("onnxscript", reason="the onnx extra is not installed")

pytestmark = pytest.mark.onnx


@pytest.mark.parametrize("length", [7, 1000], ids=lambda n: f"L{n}")
@pytest.mark.parametrize("kind", ["fake_cuda", "direct"])
def test_lowered_program_runs_in_onnxruntime(kind, length, tmp_path):
    g = torch.Generator().manual_seed(length)
    xs = [0.5 + 0.5 * torch.rand(2, length, 1, generator=g), torch.randn(2, length, 8, generator=g)]
    ep = export(kind, affine, xs, dim=1, reverse=True)
    assert lower_associative_scan(ep).changed
    expected = [y.numpy() for y in ep.module()(*xs)]
    onnx_program = torch.onnx.export(ep, dynamo=True)
    path = tmp_path / "scan.onnx"
    onnx_program.save(str(path))
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = {i.name: x.numpy() for i, x in zip(session.get_inputs(), xs, strict=True)}
    got = session.run(None, feeds)
    for g_, e in zip(got, expected, strict=True):
        torch.testing.assert_close(torch.from_numpy(g_), torch.from_numpy(e), rtol=1e-5, atol=1e-5)
