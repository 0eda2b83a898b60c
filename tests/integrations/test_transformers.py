"""ssmscan.integrations.transformers.use_ssmscan on tiny randomly initialised transformers Mamba
models: logits equal transformers' own (float32 torch) path, greedy generation is unchanged, the
cache works for decode and chunked prefill, and the adapted model compiles with fullgraph=True."""

import copy

import pytest
import torch

transformers = pytest.importorskip(
    "transformers",
    minversion="5.24",
    reason="the Hugging Face adapter needs the hf extra (transformers >= 5.24)",
)

from ssmscan.integrations.transformers import SsmscanMambaMixer, use_ssmscan  # noqa: E402
from ssmscan.testing import assert_close_to_reference  # noqa: E402

F32 = torch.float32
CONFIGS = {
    # transformers' defaults shrunk: conv bias, dt rank auto (ceil(32 / 16) = 2), expand 2, K=4
    "N8-E2-convbias-rankauto": dict(hidden_size=32, state_size=8, expand=2, num_hidden_layers=2),
    # no conv bias, explicit dt rank, expand 3, K=3, projection biases, three layers
    "N16-E3-nobias-rank5-K3": dict(
        hidden_size=24,
        state_size=16,
        expand=3,
        num_hidden_layers=3,
        use_conv_bias=False,
        time_step_rank=5,
        conv_kernel=3,
        use_bias=True,
    ),
}


def _hf_model(name: str):
    torch.manual_seed(0)
    cfg = transformers.MambaConfig(vocab_size=96, pad_token_id=0, eos_token_id=1, **CONFIGS[name])
    return transformers.MambaForCausalLM(cfg).eval()


@pytest.fixture(scope="module", params=list(CONFIGS))
def models(request):
    """(transformers' own model, the same weights adapted to ssmscan)."""
    ref = _hf_model(request.param)
    return ref, use_ssmscan(copy.deepcopy(ref))


def _ids(batch: int, length: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(2, 96, (batch, length), generator=torch.Generator().manual_seed(seed))


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
        for i in range(ref.config.num_hidden_layers):
            assert_close_to_reference(
                f"recurrent_state[{i}]",
                got.cache.get_recurrent_state(i),
                expected.cache.get_recurrent_state(i),
                F32,
            )
            assert_close_to_reference(
                f"conv_state[{i}]",
                got.cache.get_conv_state(i),
                expected.cache.get_conv_state(i),
                F32,
            )


def test_decode_steps_equal_transformers(models):
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


def test_greedy_generate_unchanged(models):
    ref, model = models
    ids = _ids(2, 9, seed=5)
    kwargs = dict(max_new_tokens=12, do_sample=False, attention_mask=torch.ones_like(ids))
    with torch.no_grad():
        expected = ref.generate(ids, **kwargs)
        got = model.generate(ids, **kwargs)
    assert got.shape == (2, 21)
    assert torch.equal(got, expected)


def test_chunked_prefill_continues_from_the_cache(models):
    """transformers' torch path restarts the SSM state for a multi-token chunk on a warm cache;
    the ssmscan mixer continues from it, so chunks equal one piece (see the module docstring)."""
    _, model = models
    ids = _ids(1, 40, seed=7)
    with torch.no_grad():
        full = model(ids, use_cache=False).logits
        out = model(ids[:, :2], use_cache=True)
        pieces, cache, start = [out.logits], out.cache, 2
        for n in (1, 3, 17, 1, 16):
            out = model(ids[:, start : start + n], cache=cache, use_cache=True)
            pieces.append(out.logits)
            start += n
    assert start == 40
    assert_close_to_reference("chunked", torch.cat(pieces, dim=1), full, F32)


def test_bfloat16_model(models):
    ref, model = models
    half = copy.deepcopy(model).bfloat16()
    ids = _ids(2, 50, seed=8)
    with torch.no_grad():
        expected = ref(ids).logits
        out = half(ids, use_cache=True)
        step = half(ids[:, -1:], cache=out.cache, use_cache=True).logits
    assert step.shape == (2, 1, 96)
    assert_close_to_reference("bf16 logits", out.logits, expected, torch.bfloat16)


def test_weights_are_shared_not_copied():
    ref = _hf_model("N8-E2-convbias-rankauto")
    before = {name: p.data_ptr() for name, p in ref.named_parameters()}
    keys = list(ref.state_dict())
    model = use_ssmscan(ref)
    assert model is ref
    assert {name: p.data_ptr() for name, p in model.named_parameters()} == before
    assert list(model.state_dict()) == keys
    mixers = [layer.mixer for layer in model.backbone.layers]
    assert all(type(m) is SsmscanMambaMixer for m in mixers)


def test_idempotent_and_impl_selectable():
    model = use_ssmscan(_hf_model("N8-E2-convbias-rankauto"))
    ids = _ids(1, 11)
    with torch.no_grad():
        first = model(ids).logits
        assert use_ssmscan(model, impl="reference") is model
        assert {layer.mixer.ssmscan_impl for layer in model.backbone.layers} == {"reference"}
        again = model(ids).logits
    assert all(type(layer.mixer) is SsmscanMambaMixer for layer in model.backbone.layers)
    assert_close_to_reference("reference impl", again, first, F32)
    with pytest.raises(ValueError, match="impl must be one of"):
        use_ssmscan(model, impl="fast")


def test_backbone_only_model():
    cfg = _hf_model("N8-E2-convbias-rankauto").config
    torch.manual_seed(1)
    ref = transformers.MambaModel(cfg).eval()
    model = use_ssmscan(copy.deepcopy(ref))
    ids = _ids(2, 13)
    with torch.no_grad():
        expected = ref(ids).last_hidden_state
        got = model(ids).last_hidden_state
    assert_close_to_reference("hidden", got, expected, F32)


def test_other_models_are_rejected():
    with pytest.raises(TypeError, match="supported family"):
        use_ssmscan(torch.nn.Linear(2, 2))
    gpt2 = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(n_layer=1, n_head=2, n_embd=8, vocab_size=16, n_positions=8)
    )
    with pytest.raises(TypeError, match="GPT2LMHeadModel"):
        use_ssmscan(gpt2)


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


@pytest.mark.slow
def test_compile_fullgraph_inductor():
    torch._dynamo.reset()
    model = use_ssmscan(_hf_model("N16-E3-nobias-rank5-K3"))
    ids = _ids(1, 17, seed=2)
    compiled = torch.compile(model, fullgraph=True, backend="inductor")
    with torch.no_grad():
        expected = model(ids, use_cache=False).logits
        got = compiled(ids, use_cache=False).logits
    assert_close_to_reference("inductor", got, expected, F32)


def test_an_old_transformers_is_named(monkeypatch):
    """A transformers older than the cache API the adapters follow fails at import with the
    version found and the one needed, not with a missing class deep in a model module."""
    import importlib
    import sys

    import transformers

    monkeypatch.setattr(transformers, "__version__", "4.57.1")
    monkeypatch.delitem(sys.modules, "ssmscan.integrations.transformers")
    with pytest.raises(ImportError, match=r"needs transformers >= 5\.24 .*found 4\.57\.1"):
        importlib.import_module("ssmscan.integrations.transformers")
