"""The adapted transformers Mamba model exports to ONNX and AOTInductor with a dynamic length;
the artifacts' logits equal transformers' own path at L in {1, 7, 300}."""

import copy

import pytest
import torch

transformers = pytest.importorskip(
    "transformers",
    minversion="5.24",
    reason="the Hugging Face adapter needs the hf extra (transformers >= 5.24)",
)

import ssmscan  # noqa: E402
from ssmscan.integrations.transformers import use_ssmscan  # noqa: E402
from ssmscan.testing import assert_close_to_reference  # noqa: E402


class Logits(torch.nn.Module):
    """input_ids -> logits, without the cache (what a deployed prefill returns)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids, use_cache=False).logits


@pytest.fixture(scope="module")
def models():
    torch.manual_seed(0)
    cfg = transformers.MambaConfig(
        vocab_size=96,
        pad_token_id=0,
        eos_token_id=1,
        hidden_size=32,
        state_size=8,
        expand=2,
        num_hidden_layers=2,
    )
    ref = transformers.MambaForCausalLM(cfg).eval()
    return ref, Logits(use_ssmscan(copy.deepcopy(ref))).eval()


@pytest.mark.parametrize("target", [pytest.param("onnx", marks=pytest.mark.onnx), "aoti"])
def test_adapted_model_exports_with_dynamic_length(models, target, tmp_path):
    if target == "onnx":
        pytest.importorskip("onnxruntime", reason="needs the onnx extra")
    ref, wrapped = models
    ids = torch.randint(2, 96, (2, 9), generator=torch.Generator().manual_seed(0))
    res = ssmscan.export(
        wrapped,
        (ids,),
        target=target,
        dynamic_shapes=({1: torch.export.Dim("L", min=1, max=4096)},),
        path=str(tmp_path / ("m.onnx" if target == "onnx" else "m.pt2")),
    )
    assert not any("ssmscan" in k for k in res.report.op_counts)
    for L in (1, 7, 300):
        x = torch.randint(2, 96, (2, L), generator=torch.Generator().manual_seed(L))
        with torch.no_grad():
            want = ref(x, use_cache=False).logits
        assert_close_to_reference(f"{target} logits L={L}", res.run(x)[0], want, torch.float32)
