"""transformers' generation paths that use the cache protocol, on a tiny transformers Mamba model
switched by ``use_ssmscan``, against the same model on transformers' own torch path: the cache's
token count during decoding, continued generation (from the output ids and from inputs_embeds,
as transformers' ``test_generate_continue_from_inputs_embeds``), assisted decoding whose drafts
are rejected (the cache rolls back with ``crop``), beam search and sampling; greedy outputs equal
token for token."""

import copy

import pytest
import torch

transformers = pytest.importorskip(
    "transformers",
    minversion="5.24",
    reason="the Hugging Face adapter needs the hf extra (transformers >= 5.24)",
)

from transformers.cache_utils import DynamicCache  # noqa: E402

from ssmscan.integrations.transformers import use_ssmscan  # noqa: E402
from ssmscan.testing import assert_close_to_reference  # noqa: E402

F32 = torch.float32
VOCAB = 96
# initializer_range 0.5: a tiny random model whose greedy continuations vary (at transformers'
# default 0.1 they repeat one token, and every draft of any assistant would be accepted)
CONFIGS = {
    "N8-K4": dict(hidden_size=32, state_size=8, num_hidden_layers=2),
    "N16-K3-rank5": dict(
        hidden_size=24, state_size=16, num_hidden_layers=2, conv_kernel=3, time_step_rank=5
    ),
}
NEEDS_TOKEN_COUNT = pytest.mark.skipif(
    not hasattr(DynamicCache, "increase_count"),
    reason="this transformers' cache keeps no token count for Mamba layers (added in 5.25)",
)
NEEDS_ROLLBACK = pytest.mark.skipif(
    not hasattr(DynamicCache, "get_recurrent_states_to_keep"),
    reason="this transformers' cache cannot roll back a recurrent state (added in 5.25), so "
    "transformers refuses assisted decoding for Mamba",
)


def _config(name: str, **overrides):
    return transformers.MambaConfig(
        vocab_size=VOCAB,
        pad_token_id=0,
        eos_token_id=1,
        initializer_range=0.5,
        **{**CONFIGS[name], **overrides},
    )


def _model(name: str, seed: int = 0):
    torch.manual_seed(seed)
    return transformers.MambaForCausalLM(_config(name)).eval()


@pytest.fixture(scope="module", params=list(CONFIGS))
def config_name(request):
    return request.param


@pytest.fixture(scope="module")
def models(config_name):
    """(transformers' own model, the same weights adapted to ssmscan)."""
    ref = _model(config_name)
    return ref, use_ssmscan(copy.deepcopy(ref))


def _ids(batch: int, length: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(2, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def _assert_caches_equal(got, expected, layers: int) -> None:
    assert int(got.get_seq_length()) == int(expected.get_seq_length())
    for i in range(layers):
        for kind in ("conv", "recurrent"):
            get = f"get_{kind}_state"
            assert_close_to_reference(
                f"{kind}_state[{i}]", getattr(got, get)(i), getattr(expected, get)(i), F32
            )


@NEEDS_TOKEN_COUNT
def test_decode_steps_advance_the_cache_length(models):
    ref, model = models
    ids = _ids(2, 12, seed=1)
    caches = []
    with torch.no_grad():
        for m in (ref, model):
            cache = m(ids[:, :8], use_cache=True).cache
            for t in range(8, 12):
                m(ids[:, t : t + 1], cache=cache, use_cache=True)
            caches.append(cache)
    assert int(caches[0].get_seq_length()) == 12
    _assert_caches_equal(caches[1], caches[0], ref.config.num_hidden_layers)


@NEEDS_TOKEN_COUNT
@pytest.mark.parametrize("inputs", ["input_ids", "inputs_embeds"])
def test_generate_continues_from_its_output(models, inputs):
    """Generate 3 tokens, then 1 more from the returned cache: the 4 equal one 4-token generate,
    and the caches agree (transformers' test_generate_continue_from_inputs_embeds, and its
    input_ids twin)."""
    ref, model = models
    ids = _ids(2, 7, seed=2)
    kwargs = dict(return_dict_in_generate=True, do_sample=False)
    runs = []
    with torch.no_grad():
        for m in (ref, model):
            embed = m.get_input_embeddings()
            first = {"input_ids": ids} if inputs == "input_ids" else {"inputs_embeds": embed(ids)}
            full = m.generate(**first, max_new_tokens=4, **kwargs)
            initial = m.generate(**first, max_new_tokens=3, **kwargs)
            if inputs == "input_ids":
                more = {"input_ids": initial.sequences}
            else:
                more = {"inputs_embeds": torch.cat([embed(ids), embed(initial.sequences)], dim=1)}
            continued = m.generate(**more, max_new_tokens=1, cache=initial.cache, **kwargs)
            if inputs == "input_ids":
                combined = continued.sequences
            else:  # generate from embeddings returns only the new tokens
                combined = torch.cat([initial.sequences, continued.sequences], dim=1)
            assert torch.equal(combined, full.sequences)
            _assert_caches_equal(continued.cache, full.cache, ref.config.num_hidden_layers)
            runs.append((full.sequences, continued.cache))
    assert torch.equal(runs[1][0], runs[0][0])
    _assert_caches_equal(runs[1][1], runs[0][1], ref.config.num_hidden_layers)


def _assistants(name: str):
    """A differently seeded model (drafts mostly rejected) and the target with perturbed weights
    (drafts partly accepted)."""
    other = _model(name, seed=1)
    near = _model(name, seed=0)
    generator = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for p in near.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=generator))
    return {"other": other, "near": near}


DRAFTS = {
    # transformers' default schedule: drafts shrink after a rejection and grow after acceptance
    "heuristic": dict(
        num_assistant_tokens=5, num_assistant_tokens_schedule="heuristic", threshold=0.4
    ),
    # always a full 3-token draft: a fully rejected one rolls back all 3 tokens of a 4-token chunk
    "constant3": dict(
        num_assistant_tokens=3, num_assistant_tokens_schedule="constant", threshold=0
    ),
}


def _assisted_cases():
    """Two cases by default (full drafts with whole-draft rejections; partial acceptance with an
    adapted assistant, whose own cache then rolls back too); every combination under slow."""
    default = {
        ("N8-K4", "other", "constant3", False),
        ("N16-K3-rank5", "near", "heuristic", True),
    }
    for name in CONFIGS:
        for kind in ("other", "near"):
            for drafts in DRAFTS:
                for adapt in (False, True):
                    case = (name, kind, drafts, adapt)
                    marks = () if case in default else (pytest.mark.slow,)
                    assistant = "ssmscan" if adapt else "hf"
                    yield pytest.param(
                        *case, marks=marks, id=f"{name}-{kind}-{drafts}-{assistant}-assistant"
                    )


@NEEDS_ROLLBACK
@pytest.mark.parametrize(
    ("config", "assistant_kind", "drafts", "adapt_assistant"), _assisted_cases()
)
def test_assisted_decoding_equals_greedy(
    config, assistant_kind, drafts, adapt_assistant, monkeypatch
):
    """Greedy assisted decoding returns transformers' own greedy tokens while drafts get
    rejected: the target's cache is rolled back through ``crop`` to the per-token states the
    adapter recorded."""
    ref = _model(config)
    model = use_ssmscan(copy.deepcopy(ref))
    assistant = _assistants(config)[assistant_kind]
    if adapt_assistant:
        use_ssmscan(assistant)
    draft = DRAFTS[drafts]
    assistant.generation_config.num_assistant_tokens = draft["num_assistant_tokens"]
    assistant.generation_config.num_assistant_tokens_schedule = draft[
        "num_assistant_tokens_schedule"
    ]
    assistant.generation_config.assistant_confidence_threshold = draft["threshold"]

    crops = []
    crop = DynamicCache.crop

    def recording_crop(self, tokens_to_remove):
        crops.append((self, tokens_to_remove))
        return crop(self, tokens_to_remove)

    monkeypatch.setattr(DynamicCache, "crop", recording_crop)
    ids = _ids(1, 9, seed=4)
    kwargs = dict(max_new_tokens=10, do_sample=False, attention_mask=torch.ones_like(ids))
    with torch.no_grad():
        expected = ref.generate(ids, **kwargs)
        got = model.generate(ids, assistant_model=assistant, return_dict_in_generate=True, **kwargs)
    rejected = [-n for cache, n in crops if cache is got.cache and n < 0]
    assert sum(rejected) > 0, "the assistant's drafts were all accepted; the test needs rejections"
    assert torch.equal(got.sequences, expected)


def test_beam_search_equals_transformers(models):
    ref, model = models
    ids = _ids(2, 9, seed=5)
    kwargs = dict(
        max_new_tokens=8,
        do_sample=False,
        num_beams=3,
        num_return_sequences=2,
        attention_mask=torch.ones_like(ids),
        return_dict_in_generate=True,
        output_scores=True,
    )
    with torch.no_grad():
        expected = ref.generate(ids, **kwargs)
        got = model.generate(ids, **kwargs)
    assert got.sequences.shape == (4, 17)
    assert torch.equal(got.sequences, expected.sequences)
    assert_close_to_reference("beam scores", got.sequences_scores, expected.sequences_scores, F32)


def test_sampling_equals_transformers(models):
    ref, model = models
    ids = _ids(2, 9, seed=6)
    kwargs = dict(max_new_tokens=10, do_sample=True, top_k=0, attention_mask=torch.ones_like(ids))
    with torch.no_grad():
        torch.manual_seed(3)
        expected = ref.generate(ids, **kwargs)
        torch.manual_seed(3)
        got = model.generate(ids, **kwargs)
    assert torch.equal(got, expected)
