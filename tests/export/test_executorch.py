"""Target "executorch": a ``.pte`` run by ExecuTorch's runtime matches eager (loop realization at
several lengths from one dynamic program, parallel at a static length); clear errors otherwise.

ExecuTorch is an optional extra (``pip install 'ssmscan[executorch]'``); the tests that build a
program skip with the reason where it does not import.
"""

from __future__ import annotations

import sys

import pytest
import torch

from ssmscan.export import TargetUnavailable, export
from ssmscan.export._common import flat_outputs
from ssmscan.models import MambaConfig, MambaMixer, build_model
from ssmscan.testing import assert_close_to_reference


def _executorch_missing() -> str | None:
    try:
        import executorch.exir
        import executorch.runtime  # noqa: F401
    except ImportError as e:
        return f"executorch not importable here ({e}); pip install 'ssmscan[executorch]'"
    return None


needs_executorch = pytest.mark.skipif(
    _executorch_missing() is not None, reason=str(_executorch_missing())
)


class Mixer(torch.nn.Module):
    """The Mamba mixer (in-projection, causal depthwise conv1d, selective scan, gate,
    out-projection) returning only its output."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.mixer = MambaMixer(MambaConfig(d_model=16, n_layer=1, vocab_size=32, d_state=8))

    def forward(self, x):
        return self.mixer(x)[0]


def _check_against_eager(outputs, model, inputs):
    with torch.no_grad():
        expected = flat_outputs(model(*inputs))
    assert len(outputs) == len(expected)
    for i, (got, ref) in enumerate(zip(outputs, expected, strict=True)):
        assert_close_to_reference(f"output {i}", got, ref, torch.float32)


def test_parallel_with_a_dynamic_length_names_the_loop():
    L = torch.export.Dim("L", min=2, max=1024)
    with pytest.raises(ValueError, match="realization='loop'"):
        export(
            Mixer().eval(),
            (torch.randn(1, 7, 16),),
            target="executorch",
            dynamic_shapes=({1: L},),
            realization="parallel",
        )


def test_missing_package_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "executorch", None)  # import executorch -> ImportError
    with pytest.raises(TargetUnavailable, match=r"ssmscan\[executorch\]"):
        export(Mixer().eval(), (torch.randn(1, 7, 16),), target="executorch")


@needs_executorch
@pytest.mark.slow
def test_loop_one_program_for_every_length(tmp_path):
    model = Mixer().eval()
    L = torch.export.Dim("L", min=1, max=1024)
    res = export(
        model,
        (torch.randn(2, 7, 16),),
        target="executorch",
        dynamic_shapes=({1: L},),
        path=str(tmp_path / "mixer.pte"),
    )
    assert res.report.realization == "loop" and res.report.artifact_bytes
    assert (tmp_path / "mixer.pte").exists()
    for length in (1, 7, 1000):
        x = torch.randn(2, length, 16)
        _check_against_eager(res.run(x), model, (x,))


@needs_executorch
@pytest.mark.slow
def test_parallel_at_a_static_length():
    model = Mixer().eval()
    x = torch.randn(2, 63, 16)
    res = export(model, (x,), target="executorch", realization="parallel")
    assert res.report.realization == "parallel"
    assert not any(k.startswith("higher_order.scan") for k in res.report.leftover_ops)
    _check_against_eager(res.run(x), model, (x,))


@needs_executorch
@pytest.mark.slow
def test_tiny_lm_logits_and_state():
    model = build_model("tiny").eval()
    ids = torch.randint(0, 256, (1, 37))
    res = export(model, (ids,), target="executorch", stateful=True)
    cfg = model.config
    conv, ssm = torch.zeros(1, cfg.d_inner, cfg.d_conv), torch.zeros(1, cfg.d_inner, cfg.d_state)
    _check_against_eager(res.run(ids, conv, conv, ssm, ssm), model, (ids,))
