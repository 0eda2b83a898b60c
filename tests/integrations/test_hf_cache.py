"""The transformers cache protocol's causal conv in token-major form (``causal_conv_tokens``):
equal to the float64 depthwise conv for a prefill, a chunk continuing from a cached window, a
recording cache and a decode step, and leaving the cache as ``causal_conv`` does."""

import copy

import pytest
import torch
import torch.nn.functional as F

transformers = pytest.importorskip(
    "transformers", reason="the Hugging Face adapter needs the hf extra (transformers)"
)

from transformers.cache_utils import DynamicCache  # noqa: E402

from ssmscan.integrations._hf_cache import causal_conv, causal_conv_tokens  # noqa: E402
from ssmscan.testing import assert_close_to_reference  # noqa: E402

F32 = torch.float32
DIM, K = 24, 4


def _mixer_and_cache():
    cfg = transformers.Mamba2Config(
        vocab_size=16, hidden_size=8, num_hidden_layers=1, num_heads=2, head_dim=8,
        state_size=4, n_groups=1, expand=2, conv_kernel=K,
    )  # fmt: skip
    g = torch.Generator().manual_seed(0)
    mixer = torch.nn.Module()
    mixer.layer_idx = 0
    mixer.conv1d = torch.nn.Conv1d(DIM, DIM, K, groups=DIM, padding=K - 1)
    with torch.no_grad():
        mixer.conv1d.weight.copy_(torch.randn(DIM, 1, K, generator=g))
        mixer.conv1d.bias.copy_(torch.randn(DIM, generator=g))
    mixer.act = torch.nn.SiLU()
    return mixer, DynamicCache(config=cfg)


def _exact(mixer, x_tokens: torch.Tensor) -> torch.Tensor:
    """float64 silu(causal depthwise conv) of (batch, L, dim), token-major."""
    w, b = mixer.conv1d.weight.double(), mixer.conv1d.bias.double()
    xc = x_tokens.double().transpose(1, 2)
    out = F.conv1d(xc, w, b, padding=K - 1, groups=DIM)[..., : xc.shape[-1]]
    return F.silu(out).transpose(1, 2)


@pytest.mark.parametrize("L", [1, 3, 9], ids=lambda L: f"L{L}")
@pytest.mark.parametrize("strided", [False, True], ids=["contiguous", "column-slice"])
def test_prefill_then_chunk_then_step_equal_float64(L, strided):
    mixer, cache = _mixer_and_cache()
    g = torch.Generator().manual_seed(1)
    total = L + 5 + 1
    full = torch.randn(2, total, DIM + 7 if strided else DIM, generator=g)[..., :DIM]
    exact = _exact(mixer, full)
    with torch.no_grad():
        parts = [
            causal_conv_tokens(mixer, full[:, :L], cache, F32),
            causal_conv_tokens(mixer, full[:, L : L + 5], cache, F32),  # from the cached window
            causal_conv_tokens(mixer, full[:, L + 5 :], cache, F32),  # one token, in place
        ]
    got = torch.cat(parts, dim=1)
    assert got.shape == exact.shape
    assert_close_to_reference("conv output", got, exact, F32)
    window = full[:, -K:].transpose(1, 2)
    assert_close_to_reference("cached window", cache.get_conv_state(0), window, F32)
    assert int(cache.get_seq_length(0)) == total


def test_recording_cache_matches_causal_conv():
    """A recording cache (assisted decoding) keeps the whole window history: the token-major
    conv hands the cache what ``causal_conv`` does and returns its output transposed."""
    mixer, cache_a = _mixer_and_cache()
    cache_b = copy.deepcopy(cache_a)
    g = torch.Generator().manual_seed(2)
    x = torch.randn(1, 6, DIM, generator=g)
    with torch.no_grad():
        a = causal_conv_tokens(mixer, x[:, :4], cache_a, F32)
        b = causal_conv(mixer, x[:, :4].transpose(1, 2), cache_b, F32).transpose(1, 2)
        for cache in (cache_a, cache_b):
            cache.layers[0].record_past = True
        a2 = causal_conv_tokens(mixer, x[:, 4:], cache_a, F32)
        b2 = causal_conv(mixer, x[:, 4:].transpose(1, 2), cache_b, F32).transpose(1, 2)
    assert_close_to_reference("prefill", a, b, F32)
    assert_close_to_reference("recorded chunk", a2, b2, F32)
    torch.testing.assert_close(cache_a.get_conv_state(0), cache_b.get_conv_state(0))


def test_symbolic_length_exports_without_guards():
    """Under ``torch.export`` with a dynamic length the shifted multiply-adds would guard L
    (L >= K, L != K); a symbolic length takes ``causal_conv``'s conv1d, so L from 1 to the
    bound stays free, and the program equals float64 at lengths below and above K."""
    mixer, _ = _mixer_and_cache()

    class Conv(torch.nn.Module):
        def forward(self, x):
            return causal_conv_tokens(mixer, x, None, F32)

    g = torch.Generator().manual_seed(2)
    L = torch.export.Dim("L", min=1, max=64)
    ep = torch.export.export(
        Conv(), (torch.randn(2, 9, DIM, generator=g),), dynamic_shapes=({1: L},)
    )
    for n in (1, 3, 4, 5, 40):
        x = torch.randn(2, n, DIM, generator=g)
        assert_close_to_reference(f"L{n}", ep.module()(x), _exact(mixer, x), F32)


@pytest.mark.parametrize("act", ["nn.SiLU", "transformers-silu", "gelu"])
@pytest.mark.parametrize("token_major", [True, False], ids=["tokens", "channels"])
def test_fused_decode_step_equals_float64(monkeypatch, act, token_major):
    """With the fused decision on (CPU stands in for CUDA: the op's CPU path for its kernel), a
    decode step under a SiLU runs ``conv1d_step_`` (one op, the window written in place); other
    activations keep the aten step. Both against float64, window and token count kept."""
    from transformers.activations import ACT2FN

    import ssmscan.integrations._hf_cache as hf_cache

    mixer, cache = _mixer_and_cache()
    mixer.act = {"nn.SiLU": torch.nn.SiLU(), "transformers-silu": ACT2FN["silu"]}.get(
        act, ACT2FN["gelu"]
    )
    monkeypatch.setattr(hf_cache, "fused_inference", lambda *ts: not torch.is_grad_enabled())
    calls = []
    real_step = hf_cache.conv1d_step_
    monkeypatch.setattr(hf_cache, "conv1d_step_", lambda *a: calls.append(1) or real_step(*a))
    g = torch.Generator().manual_seed(3)
    full = torch.randn(2, 8, DIM, generator=g)
    conv = causal_conv_tokens if token_major else causal_conv

    def run(x):
        if token_major:
            return conv(mixer, x, cache, F32)
        return conv(mixer, x.transpose(1, 2), cache, F32).transpose(1, 2)

    with torch.no_grad():
        got = torch.cat([run(full[:, :6]), run(full[:, 6:7]), run(full[:, 7:8])], dim=1)
    act64 = F.silu if act != "gelu" else F.gelu
    w, b = mixer.conv1d.weight.double(), mixer.conv1d.bias.double()
    xc = full.double().transpose(1, 2)
    exact = act64(F.conv1d(xc, w, b, padding=K - 1, groups=DIM)[..., : xc.shape[-1]])
    assert_close_to_reference("conv output", got, exact.transpose(1, 2), F32)
    window = full[:, -K:].transpose(1, 2)
    assert_close_to_reference("cached window", cache.get_conv_state(0), window, F32)
    assert int(cache.get_seq_length(0)) == 8
    assert len(calls) == (0 if act == "gelu" else 2)
