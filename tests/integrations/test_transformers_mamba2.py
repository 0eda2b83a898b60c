"""use_ssmscan on every Mamba-2 family of transformers (Mamba2, Bamba, GraniteMoeHybrid, NemotronH,
FalconH1 with and without its gated norm, Zamba2), tiny seeded models: logits and cached states
equal transformers' own float32 torch path, padding masks, decoding after a prefill, greedy and
assisted generation unchanged, bfloat16, shared weights and idempotence."""

import copy
import inspect

import pytest
import torch

transformers = pytest.importorskip(
    "transformers",
    minversion="5.24",
    reason="the Hugging Face adapter needs the hf extra (transformers >= 5.24)",
)

from transformers.cache_utils import DynamicCache  # noqa: E402

from ssmscan._cli_hf_models import build_hf_tiny  # noqa: E402
from ssmscan.integrations.transformers import (  # noqa: E402
    FAMILIES,
    SsmscanBambaMixer,
    SsmscanFalconH1Mixer,
    SsmscanGraniteMoeHybridMambaLayer,
    SsmscanMamba2Mixer,
    SsmscanNemotronHMamba2Mixer,
    SsmscanZamba2MambaMixer,
    use_ssmscan,
)
from ssmscan.testing import assert_close_to_reference  # noqa: E402

F32 = torch.float32
VOCAB = 96
# test id -> (transformers model_type, config overrides, adapted mixer class)
CASES = {
    "Mamba2": ("mamba2", {}, SsmscanMamba2Mixer),
    "Bamba": ("bamba", {}, SsmscanBambaMixer),
    "GraniteMoeHybrid": ("granitemoehybrid", {}, SsmscanGraniteMoeHybridMambaLayer),
    "NemotronH": ("nemotron_h", {}, SsmscanNemotronHMamba2Mixer),
    "FalconH1": ("falcon_h1", {}, SsmscanFalconH1Mixer),
    # no gated norm: a plain silu gate
    "FalconH1-nonorm": ("falcon_h1", {"mamba_rms_norm": False}, SsmscanFalconH1Mixer),
    "Zamba2": ("zamba2", {}, SsmscanZamba2MambaMixer),
}
ADAPTED = tuple({c[2] for c in CASES.values()})
# the features every family shares through one forward: Mamba2 in the default suite, the rest slow
MAMBA2_THEN_SLOW = [
    "Mamba2",
    *(pytest.param(c, marks=pytest.mark.slow) for c in CASES if c != "Mamba2"),
]


def _build(case: str, initializer_range: float = 0.1, seed: int = 0):
    """A tiny transformers model of ``case`` (seeded random init, nothing downloaded).

    ``initializer_range`` 0.1 (above the families' 0.02) gives the mixers a visible share of
    the logits while float32 rounding stays near 1e-6 of them."""
    family, overrides, _ = CASES[case]
    overrides = {**overrides, "initializer_range": initializer_range}
    return build_hf_tiny(family, vocab_size=VOCAB, seed=seed, config_overrides=overrides)


def _positions(model, start: int, stop: int, batch: int) -> dict:
    """``position_ids`` for a chunk at ``start`` of a cached sequence: the hybrids with attention
    (Bamba, FalconH1, ...) take positions 0.. unless told (``generate`` tells them)."""
    if "position_ids" not in inspect.signature(model.forward).parameters:
        return {}
    return {"position_ids": torch.arange(start, stop).expand(batch, -1)}


def _mixers(model):
    return [m for m in model.modules() if isinstance(m, ADAPTED)]


@pytest.fixture(scope="module", params=list(CASES))
def case(request):
    return request.param


@pytest.fixture(scope="module")
def models(case):
    """(transformers' own model, the same weights adapted to ssmscan)."""
    ref = _build(case)
    return ref, use_ssmscan(copy.deepcopy(ref))


def _ids(batch: int, length: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(2, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def test_every_mixer_is_switched(case, models):
    ref, model = models
    mixers = _mixers(model)
    assert mixers and all(type(m) is CASES[case][2] for m in mixers)
    assert not _mixers(ref)
    n_groups = {m.n_groups for m in mixers}
    assert n_groups == {2}, "the tiny models share B, C between heads (two groups)"


@pytest.mark.parametrize("L", [1, 7, 63, 300], ids=lambda L: f"L{L}")
@pytest.mark.parametrize("use_cache", [False, True], ids=["nocache", "cache"])
def test_logits_equal_transformers(models, L, use_cache):
    ref, model = models
    ids = _ids(2, L, seed=L)
    with torch.no_grad():
        expected = ref(ids, use_cache=use_cache)
        got = model(ids, use_cache=use_cache)
    assert_close_to_reference("logits", got.logits, expected.logits, F32)
    if use_cache:
        for mixer in _mixers(model):
            i = mixer.layer_idx
            for kind in ("recurrent", "conv"):
                get = f"get_{kind}_state"
                assert_close_to_reference(
                    f"{kind}_state[{i}]",
                    getattr(got.cache, get)(i),
                    getattr(expected.cache, get)(i),
                    F32,
                )
            assert got.cache.get_recurrent_state(i).dtype == F32
        assert int(got.cache.get_seq_length()) == int(expected.cache.get_seq_length()) == L


@pytest.mark.parametrize("case", MAMBA2_THEN_SLOW)
def test_left_padding_equals_transformers(case):
    """A left-padded batch: the mask zeroes padded positions before and after the conv."""
    ref = _build(case)
    model = use_ssmscan(copy.deepcopy(ref))
    ids = _ids(2, 12, seed=4)
    mask = torch.ones_like(ids)
    mask[0, :5] = 0
    ids[0, :5] = 0
    with torch.no_grad():
        expected = ref(ids, attention_mask=mask).logits
        got = model(ids, attention_mask=mask).logits
    assert_close_to_reference("padded logits", got[:, 5:], expected[:, 5:], F32)


def test_decode_after_prefill_equals_transformers(models):
    ref, model = models
    ids = _ids(2, 40, seed=3)
    outputs = []
    with torch.no_grad():
        for m in (ref, model):
            out = m(ids[:, :33], use_cache=True)
            logits, cache = [out.logits], out.cache
            for t in range(33, 40):
                pos = _positions(m, t, t + 1, 2)
                out = m(ids[:, t : t + 1], cache=cache, use_cache=True, **pos)
                logits.append(out.logits)
            outputs.append(torch.cat(logits, dim=1))
        full = model(ids, use_cache=False).logits
    assert_close_to_reference("decode vs transformers", outputs[1], outputs[0], F32)
    assert_close_to_reference("decode vs one forward", outputs[1], full, F32)


@pytest.mark.parametrize("case", MAMBA2_THEN_SLOW)
def test_chunked_prefill_continues_from_the_cache(case):
    """A second multi-token chunk continues from the cached state (as transformers' Mamba-2 path)."""
    ref = _build(case)
    model = use_ssmscan(copy.deepcopy(ref))
    ids = _ids(1, 30, seed=6)
    with torch.no_grad():
        pos = _positions(model, 17, 30, 1)
        first = model(ids[:, :17], use_cache=True)
        second = model(ids[:, 17:], cache=first.cache, use_cache=True, **pos).logits
        ref_first = ref(ids[:, :17], use_cache=True)
        expected = ref(ids[:, 17:], cache=ref_first.cache, use_cache=True, **pos).logits
        full = model(ids).logits[:, 17:]
    assert_close_to_reference("second chunk vs transformers", second, expected, F32)
    assert_close_to_reference("second chunk vs one forward", second, full, F32)


def test_greedy_generate_unchanged(case):
    # initializer_range 0.3: greedy continuations vary (at small inits they repeat a token)
    ref = _build(case, initializer_range=0.3)
    model = use_ssmscan(copy.deepcopy(ref))
    ids = _ids(2, 9, seed=5)
    kwargs = dict(max_new_tokens=20, do_sample=False, attention_mask=torch.ones_like(ids))
    with torch.no_grad():
        expected = ref.generate(ids, **kwargs)
        got = model.generate(ids, **kwargs)
    assert got.shape == (2, 29)
    assert all(len(set(row[9:].tolist())) > 3 for row in expected), "continuations should vary"
    assert torch.equal(got, expected)


@pytest.mark.skipif(
    not hasattr(DynamicCache, "get_recurrent_states_to_keep"),
    reason="this transformers' cache cannot roll back a recurrent state (added in 5.25), so "
    "transformers refuses assisted decoding for SSM layers",
)
@pytest.mark.parametrize("case", MAMBA2_THEN_SLOW)
def test_assisted_decoding_equals_greedy(case, monkeypatch):
    """Full 3-token drafts from a differently seeded (adapted) assistant, mostly rejected: the
    target's cache rolls back through ``crop`` and the tokens equal transformers' greedy ones."""
    ref = _build(case, initializer_range=0.3)
    model = use_ssmscan(copy.deepcopy(ref))
    assistant = use_ssmscan(_build(case, initializer_range=0.3, seed=1))
    assistant.generation_config.num_assistant_tokens = 3
    assistant.generation_config.num_assistant_tokens_schedule = "constant"
    assistant.generation_config.assistant_confidence_threshold = 0.0
    crops = []
    crop = DynamicCache.crop

    def recording_crop(self, tokens_to_remove):
        crops.append((self, tokens_to_remove))
        return crop(self, tokens_to_remove)

    monkeypatch.setattr(DynamicCache, "crop", recording_crop)
    ids = _ids(1, 9, seed=5)
    kwargs = dict(max_new_tokens=10, do_sample=False, attention_mask=torch.ones_like(ids))
    with torch.no_grad():
        expected = ref.generate(ids, **kwargs)
        got = model.generate(ids, assistant_model=assistant, return_dict_in_generate=True, **kwargs)
    assert sum(-n for cache, n in crops if cache is got.cache and n < 0) > 0
    assert torch.equal(got.sequences, expected)


def test_bfloat16_model(case):
    """At the families' own init (0.02): at 0.1 transformers' own bfloat16 models already sit
    above the bfloat16 tolerance of their float32 logits (Zamba2: 5e-2), as the ssmscan ones."""
    ref = _build(case, initializer_range=0.02)
    half = use_ssmscan(copy.deepcopy(ref)).bfloat16()
    ids = _ids(2, 50, seed=8)
    with torch.no_grad():
        expected = ref(ids, use_cache=True)
        out = half(ids[:, :-1], use_cache=True)
        pos = _positions(half, 49, 50, 2)
        step = half(ids[:, -1:], cache=out.cache, use_cache=True, **pos).logits
    assert all(m.in_proj.weight.dtype == torch.bfloat16 for m in _mixers(half))
    logits = torch.cat([out.logits, step], dim=1)
    assert_close_to_reference("bf16 logits", logits, expected.logits, torch.bfloat16)


@pytest.mark.parametrize("case", MAMBA2_THEN_SLOW)
def test_weights_are_shared_and_switching_is_idempotent(case):
    ref = _build(case)
    before = {name: p.data_ptr() for name, p in ref.named_parameters()}
    keys = list(ref.state_dict())
    ids = _ids(1, 11)
    with torch.no_grad():
        expected = ref(ids).logits
        model = use_ssmscan(ref)
        first = model(ids).logits
        assert use_ssmscan(model, impl="reference") is model
        again = model(ids).logits
    assert model is ref
    assert {name: p.data_ptr() for name, p in model.named_parameters()} == before
    assert list(model.state_dict()) == keys
    assert {m.ssmscan_impl for m in _mixers(model)} == {"reference"}
    assert all(type(m) is CASES[case][2] for m in _mixers(model))
    assert_close_to_reference("first", first, expected, F32)
    assert_close_to_reference("reference impl", again, expected, F32)


def test_unsupported_models_are_rejected_naming_every_family():
    names = [f.name for f in FAMILIES]
    assert names[-6:] == ["Mamba2", "Bamba", "GraniteMoeHybrid", "NemotronH", "FalconH1", "Zamba2"]
    gpt2 = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(n_layer=1, n_head=2, n_embd=8, vocab_size=16, n_positions=8)
    )
    with pytest.raises(TypeError, match=r"\(Mamba, .*, FalconH1, Zamba2\)"):
        use_ssmscan(gpt2)


def test_subclassed_mamba2_mixer_is_rejected():
    model = _build("Mamba2")
    mixer_cls = type(model.backbone.layers[0].mixer)

    class CustomMixer(mixer_cls):
        pass

    model.backbone.layers[0].mixer.__class__ = CustomMixer
    with pytest.raises(TypeError, match="CustomMixer"):
        use_ssmscan(model)


@pytest.mark.parametrize(
    "case",
    [
        "Mamba2",
        *(pytest.param(c, marks=pytest.mark.slow) for c in CASES if c != "Mamba2"),
    ],
)
def test_training_forward_backward(case):
    """In training mode without a cache transformers runs the same torch path; gradients of the
    first mixer's parameters equal it. Both sides are float32 computations, each within the
    float32 tolerance of the exact gradient, so they may differ by twice it."""
    ref = _build(case).train()
    model = use_ssmscan(copy.deepcopy(ref)).train()
    ids = _ids(2, 21, seed=7)
    name = next(n for n, mod in model.named_modules() if isinstance(mod, ADAPTED))
    grads = []
    for m in (ref, model):
        m(ids, labels=ids, use_cache=False).loss.backward()
        mixer = m.get_submodule(name)
        grads.append([mixer.A_log.grad, mixer.dt_bias.grad, mixer.in_proj.weight.grad])
    for what, got, expected in zip(("A_log", "dt_bias", "in_proj"), grads[1], grads[0]):
        assert_close_to_reference(f"grad {what}", got, expected, F32, factor=2.0)


@pytest.mark.slow
@pytest.mark.parametrize("use_cache", [False, True], ids=["nocache", "cache"])
def test_compile_fullgraph_aot_eager(models, use_cache):
    torch._dynamo.reset()
    _, model = models
    ids = _ids(2, 21, seed=9)
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    with torch.no_grad():
        expected = model(ids, use_cache=use_cache).logits
        got = compiled(ids, use_cache=use_cache).logits
    assert_close_to_reference("compiled", got, expected, F32)


@pytest.mark.parametrize("groups", [1, 3], ids=lambda g: f"groups{g}")
@pytest.mark.parametrize("case", ["Mamba2", "Bamba", "GraniteMoeHybrid", "NemotronH", "Zamba2"])
def test_inference_gated_norm_equals_the_families_norm(case, groups):
    """Under no_grad the adapter's float32 gated RMS norm (fewer passes, in place on one fresh
    tensor) equals the family's own norm module against float64, and leaves its inputs alone."""
    from ssmscan.integrations._hf_mamba2 import _GATED_NORMS

    mixer = next(m for m in use_ssmscan(_build(case)).modules() if isinstance(m, ADAPTED))
    norm = copy.deepcopy(mixer.norm)
    assert type(norm) in _GATED_NORMS
    d = 12 * groups
    norm.group_size = d // groups
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        norm.weight = torch.nn.Parameter(torch.randn(d, generator=g))
        y, z = torch.randn(2, 5, d, generator=g), torch.randn(2, 5, d, generator=g)
        y0, z0 = y.clone(), z.clone()
        mixer.norm = norm
        got = mixer._gate(y, z)
        exact = copy.deepcopy(norm).double()
        # the module computes in float32 whatever its input; the reference is its math in float64
        h = y.double() * torch.nn.functional.silu(z.double())
        hg = h.view(2, 5, groups, d // groups)
        hg = hg * torch.rsqrt(hg.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)
        ref = exact.weight * hg.view(2, 5, d)
    assert_close_to_reference("gated norm", got, ref, F32)
    assert_close_to_reference("family's norm", norm(y, z), ref, F32)
    torch.testing.assert_close(y, y0, rtol=0, atol=0)
    torch.testing.assert_close(z, z0, rtol=0, atol=0)
