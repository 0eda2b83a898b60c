"""use_ssmscan on every supported transformers SSM family beyond Mamba (FalconMamba, Jamba, Zamba),
tiny seeded models: logits and cached states equal transformers' own float32 torch path, decoding
after a prefill, greedy generation unchanged, bfloat16, shared weights, idempotence, and a clear
TypeError for what is not supported."""

import copy

import pytest
import torch

transformers = pytest.importorskip(
    "transformers",
    minversion="5.24",
    reason="the Hugging Face adapter needs the hf extra (transformers >= 5.24)",
)

from transformers.cache_utils import DynamicCache  # noqa: E402

from ssmscan.integrations.transformers import (  # noqa: E402
    FAMILIES,
    SsmscanFalconMambaMixer,
    SsmscanJambaMambaMixer,
    SsmscanZambaMambaMixer,
    use_ssmscan,
)
from ssmscan.testing import assert_close_to_reference  # noqa: E402

F32 = torch.float32
VOCAB = 96
COMMON = dict(vocab_size=VOCAB, pad_token_id=0, eos_token_id=1)
ADAPTED = {
    "FalconMamba": SsmscanFalconMambaMixer,
    "Jamba": SsmscanJambaMambaMixer,
    "Zamba": SsmscanZambaMambaMixer,
}


def _build(family: str, initializer_range: float | None = None, seed: int = 0):
    """A tiny transformers model of ``family`` (seeded random init, no download)."""
    extra = {} if initializer_range is None else {"initializer_range": initializer_range}
    if family == "FalconMamba":
        cfg = transformers.FalconMambaConfig(
            hidden_size=32, state_size=8, num_hidden_layers=2, **COMMON, **extra
        )
        cls = transformers.FalconMambaForCausalLM
    elif family == "Jamba":
        # layers: mamba, attention, mamba (attention every 3rd from 1); one expert: a plain MLP
        cfg = transformers.JambaConfig(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=3,
            num_attention_heads=4,
            num_key_value_heads=2,
            num_experts=1,
            attn_layer_period=3,
            attn_layer_offset=1,
            mamba_d_state=8,
            mamba_d_conv=4,
            mamba_expand=2,
            mamba_dt_rank=4,
            **COMMON,
            **extra,
        )
        cls = transformers.JambaForCausalLM
    elif family == "Zamba":
        # layers: mamba, mamba + shared attention, mamba, mamba + shared attention, mamba;
        # two Mamba heads per mixer, K=3
        cfg = transformers.ZambaConfig(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=5,
            num_attention_heads=4,
            num_key_value_heads=4,
            attention_hidden_size=64,
            attention_head_dim=16,
            n_mamba_heads=2,
            mamba_d_state=8,
            mamba_d_conv=3,
            mamba_expand=2,
            mamba_dt_rank=4,
            attn_layer_period=2,
            attn_layer_offset=1,
            **COMMON,
            **extra,
        )
        cls = transformers.ZambaForCausalLM
    else:
        raise ValueError(family)
    torch.manual_seed(seed)
    return cls(cfg).eval()


def _mixers(model):
    return [m for m in model.modules() if isinstance(m, tuple(ADAPTED.values()))]


@pytest.fixture(scope="module", params=list(ADAPTED))
def family(request):
    return request.param


@pytest.fixture(scope="module")
def models(family):
    """(transformers' own model at its default init, the same weights adapted to ssmscan)."""
    ref = _build(family)
    return ref, use_ssmscan(copy.deepcopy(ref))


def _ids(batch: int, length: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(2, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def test_every_mixer_is_switched(family, models):
    ref, model = models
    mixers = _mixers(model)
    assert mixers and all(type(m) is ADAPTED[family] for m in mixers)
    assert not _mixers(ref)


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


def test_decode_after_prefill_equals_transformers(models):
    ref, model = models
    ids = _ids(2, 15, seed=3)
    outputs = []
    with torch.no_grad():
        for m in (ref, model):
            out = m(ids[:, :10], use_cache=True)
            logits, cache = [out.logits], out.cache
            for t in range(10, 15):
                out = m(ids[:, t : t + 1], cache=cache, use_cache=True)
                logits.append(out.logits)
            outputs.append(torch.cat(logits, dim=1))
        full = model(ids, use_cache=False).logits
    assert_close_to_reference("decode vs transformers", outputs[1], outputs[0], F32)
    assert_close_to_reference("decode vs one forward", outputs[1], full, F32)


def test_greedy_generate_unchanged(family):
    # initializer_range 1.0: greedy continuations vary (at the default init they repeat a token)
    ref = _build(family, initializer_range=1.0)
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
    not hasattr(DynamicCache, "increase_count"),
    reason="this transformers' cache keeps no token count for SSM layers (added in 5.25)",
)
def test_generate_continues_from_its_output(family):
    """Generate 3 tokens, then 1 more from the returned cache: the 4 equal one 4-token generate."""
    ref = _build(family, initializer_range=1.0)
    model = use_ssmscan(copy.deepcopy(ref))
    ids = _ids(2, 7, seed=2)
    kwargs = dict(return_dict_in_generate=True, do_sample=False)
    with torch.no_grad():
        expected = ref.generate(ids, max_new_tokens=4, **kwargs).sequences
        full = model.generate(ids, max_new_tokens=4, **kwargs)
        initial = model.generate(ids, max_new_tokens=3, **kwargs)
        continued = model.generate(
            initial.sequences, max_new_tokens=1, cache=initial.cache, **kwargs
        )
    assert torch.equal(full.sequences, expected)
    assert torch.equal(continued.sequences, expected)
    assert int(continued.cache.get_seq_length()) == int(full.cache.get_seq_length())


@pytest.mark.skipif(
    not hasattr(DynamicCache, "get_recurrent_states_to_keep"),
    reason="this transformers' cache cannot roll back a recurrent state (added in 5.25), so "
    "transformers refuses assisted decoding for SSM layers",
)
@pytest.mark.parametrize(
    "family",
    [
        pytest.param("FalconMamba", marks=pytest.mark.slow),  # the Mamba path with norms
        pytest.param("Jamba", marks=pytest.mark.slow),
        "Zamba",  # the state cached per head; transformers' own mixer cannot roll back
    ],
)
def test_assisted_decoding_equals_greedy(family, monkeypatch):
    """Full 3-token drafts from a differently seeded (adapted) assistant, mostly rejected: the
    target's cache rolls back through ``crop`` and the tokens equal transformers' greedy ones.
    (transformers' own Zamba mixer writes its state in place and keeps no history, so an
    unadapted Zamba assistant fails in ``crop``.)"""
    ref = _build(family, initializer_range=1.0)
    model = use_ssmscan(copy.deepcopy(ref))
    assistant = use_ssmscan(_build(family, initializer_range=1.0, seed=1))
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


def test_bfloat16_model(models):
    ref, model = models
    half = copy.deepcopy(model).bfloat16()
    ids = _ids(2, 50, seed=8)
    with torch.no_grad():
        expected = ref(ids).logits
        out = half(ids, use_cache=True)
        step = half(ids[:, -1:], cache=out.cache, use_cache=True).logits
    assert all(m.in_proj.weight.dtype == torch.bfloat16 for m in _mixers(half))
    assert step.shape == (2, 1, VOCAB)
    assert_close_to_reference("bf16 logits", out.logits, expected, torch.bfloat16)


def test_weights_are_shared_and_switching_is_idempotent(family):
    ref = _build(family)
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
    assert all(type(m) is ADAPTED[family] for m in _mixers(model))
    assert_close_to_reference("first", first, expected, F32)
    assert_close_to_reference("reference impl", again, expected, F32)


def test_unsupported_models_are_rejected_naming_the_families():
    assert [f.name for f in FAMILIES][:4] == ["Mamba", "FalconMamba", "Jamba", "Zamba"]
    gpt2 = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(n_layer=1, n_head=2, n_embd=8, vocab_size=16, n_positions=8)
    )
    for model in (gpt2, torch.nn.Linear(2, 2)):
        with pytest.raises(TypeError, match=r"\(Mamba, FalconMamba, Jamba, Zamba, "):
            use_ssmscan(model)


def test_subclassed_mixer_is_rejected():
    model = _build("FalconMamba")
    mixer_cls = type(model.backbone.layers[0].mixer)

    class CustomMixer(mixer_cls):
        pass

    model.backbone.layers[0].mixer.__class__ = CustomMixer
    with pytest.raises(TypeError, match="CustomMixer"):
        use_ssmscan(model)


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
