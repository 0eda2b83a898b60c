"""ssmscan.models: config and presets, seeded init, the layer math against a plain float64 oracle,
impl selection, generate, compile and export of the state pytree."""

import copy
import dataclasses
import math
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from ssmscan.models import (
    MambaBlock,
    MambaConfig,
    MambaLM,
    MambaMixer,
    MambaState,
    RMSNorm,
    build_model,
)
from ssmscan.testing import assert_close_to_reference

TINY = MambaConfig.preset("tiny")
# Odd widths: d_inner 72, dt_rank 3 (auto), d_conv 3, N 5, padded vocab 104 -> logits sliced to 100.
ODD = MambaConfig(d_model=36, n_layer=3, vocab_size=100, d_state=5, d_conv=3, seed=7, bias=True)


def _model(cfg: MambaConfig = TINY, impl: str = "auto") -> MambaLM:
    return MambaLM.from_config(cfg, impl=impl).eval()


def _ids(batch: int, length: int, vocab: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(seed))


# ---- the oracle: Mamba-1 written out sequentially in float64 from the parameters ----


def _mixer_oracle(mixer: MambaMixer, h: torch.Tensor) -> torch.Tensor:
    """h (batch, L, d_model) float64 -> (batch, L, d_model): conv by explicit taps, scan by a loop."""
    p = {k: v.detach().double() for k, v in mixer.state_dict().items()}
    xz = h @ p["in_proj.weight"].T + p.get("in_proj.bias", 0.0)
    x, z = xz.chunk(2, dim=-1)  # (batch, L, d_inner)
    K, L = mixer.d_conv, x.shape[1]
    w = p["conv1d.weight"][:, 0, :]  # (d_inner, K)
    conv = torch.zeros_like(x) + p.get("conv1d.bias", 0.0)
    for t in range(L):
        for k in range(K):
            s = t - (K - 1) + k
            if s >= 0:
                conv[:, t] += w[:, k] * x[:, s]
    x = F.silu(conv)
    dbc = x @ p["x_proj.weight"].T
    dt, B, C = torch.split(dbc, [mixer.dt_rank, mixer.d_state, mixer.d_state], dim=-1)
    dt = F.softplus(dt @ p["dt_proj.weight"].T + p["dt_proj.bias"])
    A = -torch.exp(p["A_log"])
    state = torch.zeros(x.shape[0], x.shape[2], mixer.d_state, dtype=torch.float64)
    ys = []
    for t in range(L):
        state = (
            torch.exp(dt[:, t, :, None] * A) * state
            + (dt[:, t] * x[:, t])[..., None] * B[:, t, None, :]
        )
        ys.append((state * C[:, t, None, :]).sum(-1) + p["D"] * x[:, t])
    y = torch.stack(ys, dim=1) * F.silu(z)
    return y @ p["out_proj.weight"].T + p.get("out_proj.bias", 0.0)


def _lm_oracle(model: MambaLM, ids: torch.Tensor) -> torch.Tensor:
    h = model.embedding.weight.detach().double()[ids]
    for block in model.layers:
        n = block.norm
        normed = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + n.eps) * n.weight.double()
        h = h + _mixer_oracle(block.mixer, normed)
    n = model.norm_f
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + n.eps) * n.weight.double()
    return (h @ model.lm_head.weight.detach().double().T)[..., : model.config.vocab_size]


@pytest.mark.parametrize(
    "cfg,batch,L",
    [(TINY, 2, 1), (TINY, 2, 7), (TINY, 1, 63), (ODD, 2, 7), (ODD, 1, 40)],
    ids=["tiny-B2-L1", "tiny-B2-L7", "tiny-B1-L63", "odd-B2-L7", "odd-B1-L40"],
)
def test_logits_match_float64_oracle(cfg, batch, L):
    model = _model(cfg)
    ids = _ids(batch, L, cfg.vocab_size)
    with torch.no_grad():
        logits, state = model(ids)
    assert logits.shape == (batch, L, cfg.vocab_size) and logits.dtype == torch.float32
    assert_close_to_reference("logits", logits, _lm_oracle(model, ids), torch.float32)
    assert state.n_layer == cfg.n_layer and state.batch_size == batch
    assert state.conv_states[0].shape == (batch, cfg.d_inner, cfg.d_conv)
    assert state.ssm_states[0].shape == (batch, cfg.d_inner, cfg.d_state)
    assert state.ssm_states[0].dtype == torch.float32


@pytest.mark.parametrize(
    "impl,L",
    [("auto", 1), ("auto", 7), ("cpu", 63), ("auto", 1000)],
    ids=["auto-L1", "auto-L7", "cpu-L63", "auto-L1000"],
)
def test_impls_match_float64_reference_model(impl, L):
    """fp32 model on the kernel vs the same weights in float64 on the sequential reference."""
    model = _model(impl=impl)
    ref = copy.deepcopy(model).double()
    ref.impl = "reference"
    ids = _ids(2, L, TINY.vocab_size, seed=L)
    with torch.no_grad():
        logits, state = model(ids)
        ref_logits, ref_state = ref(ids)
    assert_close_to_reference("logits", logits, ref_logits, torch.float32)
    for i in range(TINY.n_layer):
        assert_close_to_reference(
            f"ssm{i}", state.ssm_states[i], ref_state.ssm_states[i], torch.float32
        )
        assert_close_to_reference(
            f"conv{i}", state.conv_states[i], ref_state.conv_states[i], torch.float32
        )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["fp32", "fp64"])
@pytest.mark.parametrize("cfg", [TINY, ODD], ids=["tiny", "odd-with-biases"])
def test_channel_major_prefill_equals_the_token_major_path(cfg, dtype, monkeypatch):
    """Inference (no gradient, not traced) prefills channel-major (Note [channel-major prefill]);
    training keeps the token-major modules. The two agree on a whole prefill and on a chunk that
    continues from states, outputs and states alike (random biases: the init zeroes them)."""
    torch.manual_seed(5)
    mixer = MambaMixer(cfg).to(dtype)
    with torch.no_grad():
        for p in (mixer.in_proj.bias, mixer.out_proj.bias, mixer.conv1d.bias):
            if p is not None:
                p.copy_(0.1 * torch.randn(p.shape))
    h = torch.randn(2, 37, cfg.d_model, dtype=dtype)
    conv_state = torch.randn(2, cfg.d_inner, cfg.d_conv, dtype=dtype)
    ssm_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    ssm_state = torch.randn(2, cfg.d_inner, cfg.d_state, dtype=ssm_dtype)
    calls = []
    prefill = MambaMixer._prefill_channel_major
    monkeypatch.setattr(MambaMixer, "_prefill_channel_major",
                        lambda self, *a: calls.append(1) or prefill(self, *a))  # fmt: skip
    for states in ((None, None), (conv_state, ssm_state)):
        token_major = [t.detach() for t in mixer(h, *states)]  # parameters require grad
        assert not calls
        with torch.no_grad():
            channel_major = mixer(h, *states)
        assert calls and calls.pop()
        for name, got, want in zip(("out", "conv_state", "ssm_state"), channel_major, token_major):
            assert got.shape == want.shape and got.dtype == want.dtype, name
            assert_close_to_reference(name, got, want, dtype)


def test_block_is_prenorm_residual():
    block = MambaBlock(TINY).eval()
    h = torch.randn(2, 9, TINY.d_model)
    with torch.no_grad():
        out, _, _ = block(h)
        mixed, _, _ = block.mixer(block.norm(h))
    torch.testing.assert_close(out, h + mixed)


def test_rmsnorm():
    norm = RMSNorm(8, eps=1e-6)
    with torch.no_grad():
        norm.weight.copy_(torch.arange(8.0))
    x = torch.randn(3, 8, dtype=torch.float64)
    expected = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * torch.arange(8.0)
    torch.testing.assert_close(norm(x.float()).double(), expected, rtol=1e-6, atol=1e-6)
    assert norm(x.bfloat16()).dtype == torch.bfloat16


# ---- config and presets ----


def test_presets():
    assert {"tiny", "130m", "370m"} <= set(MambaConfig.PRESETS)
    tiny = MambaConfig.preset("tiny")
    assert (tiny.d_model, tiny.n_layer, tiny.vocab_size) == (64, 2, 256)
    assert (tiny.d_inner, tiny.resolved_dt_rank, tiny.padded_vocab_size) == (128, 4, 256)
    big = MambaConfig.preset("130m")
    assert (big.d_model, big.n_layer, big.resolved_dt_rank, big.padded_vocab_size) == (
        768,
        24,
        48,
        50280,
    )
    with pytest.raises(ValueError, match="unknown Mamba preset"):
        MambaConfig.preset("7b")


def test_130m_preset_has_the_released_parameter_count():
    """Built on the meta device (no memory): mamba-130m has 129,135,360 parameters (tied)."""
    with torch.device("meta"):
        model = MambaLM(MambaConfig.preset("130m"))
    assert sum(p.numel() for p in model.parameters()) == 129_135_360


def test_config_is_frozen_and_validated():
    with pytest.raises(dataclasses.FrozenInstanceError):
        TINY.d_model = 1  # type: ignore[misc]
    assert dataclasses.replace(TINY, dt_rank=7).resolved_dt_rank == 7
    for bad in ({"d_model": 0}, {"dt_rank": 0}, {"dt_init": "x"}, {"dt_min": 0.5, "dt_max": 0.1}):
        with pytest.raises(ValueError):
            dataclasses.replace(TINY, **bad)


# ---- initialisation ----


def test_init_is_seeded_and_leaves_global_rng_alone():
    torch.manual_seed(123)
    before = torch.rand(3)
    torch.manual_seed(123)
    a, b = build_model("tiny"), build_model("tiny")
    assert torch.equal(torch.rand(3), before)  # construction did not draw from the global RNG
    for (name, pa), pb in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(pa, pb), name
    c = build_model(dataclasses.replace(TINY, seed=1))
    assert not torch.equal(a.layers[0].mixer.in_proj.weight, c.layers[0].mixer.in_proj.weight)


def test_init_follows_mamba_ssm():
    model = build_model(TINY)
    mixer = model.layers[0].mixer
    expected_A_log = torch.log(torch.arange(1, TINY.d_state + 1.0)).expand(TINY.d_inner, -1)
    torch.testing.assert_close(mixer.A_log.detach(), expected_A_log)
    assert torch.equal(mixer.D.detach(), torch.ones(TINY.d_inner))
    dt = F.softplus(mixer.dt_proj.bias.detach())
    assert float(dt.min()) >= TINY.dt_min * (1 - 1e-4) and float(dt.max()) <= TINY.dt_max * (
        1 + 1e-4
    )
    bound = TINY.resolved_dt_rank**-0.5
    assert float(mixer.dt_proj.weight.detach().abs().max()) <= bound
    assert model.lm_head.weight is model.embedding.weight  # tied
    assert math.isclose(float(model.embedding.weight.std()), 0.02, rel_tol=0.1)
    untied = build_model(dataclasses.replace(TINY, tie_embeddings=False))
    assert untied.lm_head.weight is not untied.embedding.weight


# ---- impl selection, build_model ----


def test_impl_is_selectable():
    model = _model(impl="reference")
    assert all(block.mixer.impl == "reference" for block in model.layers)
    model.impl = "cpu"
    assert model.impl == "cpu" and all(block.mixer.impl == "cpu" for block in model.layers)
    with pytest.raises(ValueError, match="impl must be one of"):
        model.impl = "fast"  # type: ignore[assignment]
    with pytest.raises(ValueError, match="impl must be one of"):
        build_model("tiny", impl="cuda")  # type: ignore[arg-type]


def test_build_model_rejects_other_types():
    assert isinstance(build_model("tiny"), MambaLM)
    with pytest.raises(TypeError, match="preset name or a MambaConfig"):
        build_model(3)  # type: ignore[arg-type]


def test_state_must_match_the_model():
    model = _model()
    _, state = model(_ids(1, 4, 256))
    with pytest.raises(ValueError, match="covers 1 layers"):
        model(_ids(1, 1, 256), MambaState(state.conv_states[:1], state.ssm_states[:1]))
    with pytest.raises(ValueError, match="one conv and one ssm state per layer"):
        MambaState(state.conv_states, state.ssm_states[:1])


# ---- generate ----


def test_greedy_generate_equals_argmax_of_full_forwards():
    model = _model(ODD)
    prompt = _ids(2, 5, ODD.vocab_size)
    out = model.generate(prompt, max_new_tokens=6)
    assert out.shape == (2, 11) and torch.equal(out[:, :5], prompt)
    seq = prompt
    with torch.no_grad():
        for _ in range(6):
            logits, _ = model(seq)
            seq = torch.cat([seq, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(out, seq)
    assert torch.equal(model.generate(prompt, 0), prompt)
    assert torch.equal(model.generate(prompt, 3, temperature=0.0), out[:, :8])


def test_sampling_is_reproducible_and_top_k_1_is_greedy():
    model = _model()
    prompt = _ids(2, 4, 256)

    def sample(seed):
        g = torch.Generator().manual_seed(seed)
        return model.generate(prompt, 8, temperature=1.5, top_k=10, generator=g)

    assert torch.equal(sample(0), sample(0))
    assert int(sample(0).max()) < TINY.vocab_size
    g = torch.Generator().manual_seed(0)
    top1 = model.generate(prompt, 5, temperature=1.0, top_k=1, generator=g)
    assert torch.equal(top1, model.generate(prompt, 5))
    with pytest.raises(ValueError, match="top_k"):
        model.generate(prompt, 2, temperature=1.0, top_k=0)


# ---- dtypes, compile, export ----


def test_bfloat16_model():
    model = copy.deepcopy(_model()).bfloat16()
    ids = _ids(2, 20, 256)
    with torch.no_grad():
        logits, state = model(ids)
        step, _ = model(ids[:, -1:], state)
        ref, _ = _model()(ids)
    assert logits.dtype == step.dtype == torch.bfloat16
    assert state.conv_states[0].dtype == torch.bfloat16
    assert state.ssm_states[0].dtype == torch.float32
    assert_close_to_reference("bf16 logits", logits, ref, torch.bfloat16)


@pytest.mark.parametrize("backend", ["aot_eager"])
def test_compile_fullgraph_prefill_and_decode(backend):
    torch._dynamo.reset()
    model = _model()
    ids = _ids(2, 37, 256)
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    with torch.no_grad():
        ref, ref_state = model(ids)
        out, state = compiled(ids)
        assert isinstance(state, MambaState)
        step_ref, _ = model(ids[:, -1:], ref_state)
        step, _ = compiled(ids[:, -1:], state)
    assert_close_to_reference("prefill", out, ref, torch.float32)
    assert_close_to_reference("decode", step, step_ref, torch.float32)


@pytest.mark.slow
def test_compile_inductor():
    torch._dynamo.reset()
    model = _model()
    ids = _ids(1, 33, 256)
    compiled = torch.compile(model, fullgraph=True, backend="inductor")
    with torch.no_grad():
        ref, ref_state = model(ids)
        out, state = compiled(ids)
        step_ref, _ = model(ids[:, -1:], ref_state)
        step, _ = compiled(ids[:, -1:], state)
    assert_close_to_reference("prefill", out, ref, torch.float32)
    assert_close_to_reference("decode", step, step_ref, torch.float32)


def test_export_takes_and_returns_the_state_pytree():
    model = _model()
    ids = _ids(2, 9, 256)
    with torch.no_grad():
        _, state = model(ids)
        step_ref, next_ref = model(ids[:, -1:], state)
        ep = torch.export.export(model, (ids[:, -1:], state))
        names = ep.graph_signature.user_inputs
        assert names[0] == "input_ids" and len(names) == 1 + 2 * TINY.n_layer
        step, next_state = ep.module()(ids[:, -1:], state)
    assert isinstance(next_state, MambaState)
    torch.testing.assert_close(step, step_ref)
    for a, b in zip(next_state.ssm_states, next_ref.ssm_states):
        torch.testing.assert_close(a, b)


def test_importing_models_does_not_import_transformers():
    code = (
        "import sys, ssmscan.models, ssmscan.integrations; "
        "assert 'transformers' not in sys.modules, 'transformers imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
