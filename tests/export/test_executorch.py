"""Target "executorch": a ``.pte`` run by ExecuTorch's runtime matches eager (loop realization at
several lengths from one dynamic program, parallel at a static length); clear errors otherwise.

ExecuTorch is an optional extra (``pip install 'ssmscan[executorch]'``); the tests that build a
program skip with the reason where it does not import.
"""

from __future__ import annotations

import sys

import pytest
import torch
from extras import needs_executorch

from ssmscan.export import TargetUnavailable, export
from ssmscan.export._common import flat_outputs
from ssmscan.models import MambaConfig, MambaMixer, build_model
from ssmscan.testing import assert_close_to_reference


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


class Attention(torch.nn.Module):
    """Causal attention over a dynamic length: its (batch, heads, L, L) scores make ExecuTorch's
    memory plan quadratic in the length's upper bound."""

    def __init__(self, dim=8, heads=2):
        super().__init__()
        torch.manual_seed(0)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.heads = heads

    def forward(self, x):  # x (batch, L, dim)
        b, L, d = x.shape
        q, k, v = self.qkv(x).view(b, L, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        pos = torch.arange(L)
        mask = pos[None, :] <= pos[:, None]
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@needs_executorch
def test_plan_beyond_memory_raises_naming_the_bound_and_the_layer(tmp_path):
    from ssmscan.export.executorch import PlanTooLarge

    # at L <= 2**20 each (1, 2, L, L) float32 score tensor alone is 8 TiB
    L = torch.export.Dim("L", min=2, max=2**20)
    path = tmp_path / "attention.pte"
    with pytest.raises(PlanTooLarge, match=r"at L <= 1048576 ExecuTorch's memory plan") as info:
        export(
            Attention().eval(),
            (torch.randn(1, 7, 8),),
            target="executorch",
            dynamic_shapes=({1: L},),
            path=str(path),
        )
    msg = str(info.value)
    assert "(1, 2, 1048576, 1048576) float32 (8192.0 GiB each" in msg, msg
    assert "Dim max" in msg and "static" in msg
    assert info.value.planned_bytes > info.value.limit_bytes
    assert not path.exists()  # refused before writing a program the runtime cannot load


@needs_executorch
def test_plan_checked_against_the_given_limit():
    from ssmscan.export.executorch import PlanTooLarge, _check_plan, planned_bytes

    model = Attention().eval()
    L = torch.export.Dim("L", min=2, max=64)
    res = export(model, (torch.randn(1, 7, 8),), target="executorch", dynamic_shapes=({1: L},))
    planned = planned_bytes(res.artifact)
    assert planned >= 2 * 64 * 64 * 4  # one (1, 2, 64, 64) float32 score tensor at least
    assert f"memory plan at L <= 64: {planned / 2**20:.1f} MiB" in res.report.notes
    _check_plan(res.artifact, res.signature, planned)
    with pytest.raises(PlanTooLarge, match=r"at L <= 64 .* more than this machine's"):
        _check_plan(res.artifact, res.signature, planned - 1)
    for length in (2, 7, 64):
        x = torch.randn(1, length, 8)
        _check_against_eager(res.run(x), model, (x,))
