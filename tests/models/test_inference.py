"""ssmscan.models.inference: the fused inference path of the Mamba LMs (Note [fused inference]).

On CPU the wiring is checked through the ops' CPU paths (the decision forced on): the fused
model gives the PyTorch model's logits and states and calls every fused op. On CUDA (``gpu``)
the same comparison runs the Triton kernels, the decision taken from the inputs alone
(``torch.inference_mode`` against grad mode with parameters requiring grad).
"""

import copy
import dataclasses
import os
from collections import Counter

import pytest
import torch
from mamba2_configs import ODD
from torch.utils._python_dispatch import TorchDispatchMode

import ssmscan.models.lm_base as lm_base_mod
import ssmscan.models.mamba as mamba_mod
import ssmscan.models.mamba2 as mamba2_mod
import ssmscan.ops.causal_conv1d.op as causal_conv1d_op
import ssmscan.ops.conv1d_step.op as conv1d_step_op
import ssmscan.ops.rms_norm.op as rms_norm_op
from ssmscan.models import Mamba2Config, Mamba2LM, MambaConfig, MambaLM
from ssmscan.models.inference import fused_inference
from ssmscan.testing import assert_close_to_reference

FUSED_OPS = ("rms_norm", "add_rms_norm", "gated_rms_norm", "conv1d_step", "causal_conv1d")
NOGATE = Mamba2Config(
    d_model=32, n_layer=2, vocab_size=64, d_state=8, headdim=16, rmsnorm=False, conv_bias=False,
    residual_in_fp32=False, seed=3,
)  # fmt: skip
CONFIGS = {"tiny": Mamba2Config.preset("tiny"), "odd": ODD, "nogate": NOGATE}


class _CountSsmscanOps(TorchDispatchMode):
    """Counts calls of ``torch.ops.ssmscan.*`` by op name."""

    def __init__(self):
        super().__init__()
        self.calls = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "ssmscan":
            self.calls[func._opname] += 1
        return func(*args, **(kwargs or {}))


def _prefill_and_decode(model, ids, prompt):
    """Logits of a prefill over ids[:, :prompt] in two chunks (the second continuing from the
    first's state) and decode steps over the rest; the last state."""
    first, state = model(ids[:, : prompt // 2])
    logits, state = model(ids[:, prompt // 2 : prompt], state)
    steps = [first, logits]
    for t in range(prompt, ids.shape[1]):
        step, state = model(ids[:, t : t + 1], state)
        steps.append(step)
    return torch.cat(steps, dim=1), state


def _assert_same_run(name, got, want, dtype):
    (logits, state), (ref_logits, ref_state) = got, want
    assert logits.dtype == dtype and state.conv_states[0].dtype == dtype
    assert state.ssm_states[0].dtype == torch.float32
    assert_close_to_reference(f"{name} logits", logits, ref_logits, dtype)
    for i in range(state.n_layer):
        for kind in ("conv_states", "ssm_states"):
            a, b = getattr(state, kind)[i], getattr(ref_state, kind)[i]
            assert a.shape == b.shape
            assert_close_to_reference(f"{name} {kind}[{i}]", a, b, dtype)


def _forced_on(*tensors):
    """The decision with the device condition dropped (CPU stands in for CUDA)."""
    grad = torch.is_grad_enabled()
    return not any(t is not None and grad and t.requires_grad for t in tensors)


def _force_fused(monkeypatch):
    for mod in (lm_base_mod, mamba_mod, mamba2_mod):
        monkeypatch.setattr(mod, "fused_inference", _forced_on)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_fused_wiring_gives_the_pytorch_models_results(monkeypatch, name, dtype):
    """The forced fused path through the ops' CPU implementations against the PyTorch path in
    float32 (bf16: the bf16 tolerance, as the bf16 model against the float32 model)."""
    ref_model = Mamba2LM.from_config(CONFIGS[name]).eval()
    model = copy.deepcopy(ref_model).to(dtype)
    ids = torch.randint(0, 64, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = _prefill_and_decode(ref_model, ids, 6)
    _force_fused(monkeypatch)
    with torch.no_grad(), _CountSsmscanOps() as counter:
        got = _prefill_and_decode(model, ids, 6)
    _assert_same_run(name, got, want, dtype)
    n_layer, calls = model.config.n_layer, 5  # two prefill chunks and three decode steps
    assert counter.calls["rms_norm"] == calls  # the first block's pre-norm
    assert counter.calls["add_rms_norm"] == n_layer * calls  # the others' and norm_f
    assert counter.calls["gated_rms_norm"] == (n_layer * calls if model.config.rmsnorm else 0)
    assert counter.calls["causal_conv1d"] == n_layer * 2
    assert counter.calls["conv1d_step"] == n_layer * 3
    with _CountSsmscanOps() as counter:  # grad mode, parameters requiring grad: PyTorch's path
        model(ids)
    assert not any(counter.calls[op] for op in FUSED_OPS)


@pytest.mark.parametrize(
    "residual_in_fp32,bias",
    [(True, False), (False, False), (True, True)],
    ids=["fp32-residual", "bf16-residual", "projection-biases"],
)
def test_fused_wiring_of_mamba1(monkeypatch, residual_in_fp32, bias):
    """Mamba-1's fused path (its channel-major prefill, Note [channel-major prefill]) through the
    ops' CPU paths against the PyTorch model; with biases in in_proj and out_proj and none in the
    convolution too."""
    cfg = dataclasses.replace(MambaConfig.preset("tiny"), residual_in_fp32=residual_in_fp32,
                              bias=bias, conv_bias=not bias)  # fmt: skip
    ref_model = MambaLM.from_config(cfg).eval()
    if bias:  # the init zeroes projection biases: random ones, so a misplaced bias shows
        g = torch.Generator().manual_seed(3)
        with torch.no_grad():
            for layer in ref_model.layers:
                for proj in (layer.mixer.in_proj, layer.mixer.out_proj):
                    proj.bias.copy_(0.1 * torch.randn(proj.bias.shape, generator=g))
    model = copy.deepcopy(ref_model).bfloat16()
    ids = torch.randint(0, 256, (2, 9), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        want = _prefill_and_decode(ref_model, ids, 7)
    _force_fused(monkeypatch)
    with torch.no_grad(), _CountSsmscanOps() as counter:
        got = _prefill_and_decode(model, ids, 7)
    _assert_same_run("mamba1", got, want, torch.bfloat16)
    assert counter.calls["add_rms_norm"] == cfg.n_layer * 4  # two prefill chunks, two steps
    assert counter.calls["causal_conv1d"] == cfg.n_layer * 2
    assert counter.calls["conv1d_step"] == cfg.n_layer * 2


INTERPRET = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1",
    reason="interpreter tests need TRITON_INTERPRET=1 (no GPU)",
)


def _through_the_kernels(monkeypatch, ref_model, ids, prompt):
    """(the fused path of a copy of ref_model with every op taking its Triton kernel, ref_model's
    PyTorch path), each ``_prefill_and_decode``."""
    model = copy.deepcopy(ref_model)
    with torch.no_grad():
        want = _prefill_and_decode(ref_model, ids, prompt)
    _force_fused(monkeypatch)
    monkeypatch.setattr(rms_norm_op, "_fused", lambda x, w: True)
    monkeypatch.setattr(conv1d_step_op, "_fused", lambda x, s, w: True)
    monkeypatch.setattr(causal_conv1d_op, "_fused", lambda x, *others: True)
    with torch.no_grad():
        got = _prefill_and_decode(model, ids, prompt)
    return got, want


@pytest.mark.triton
@INTERPRET
@pytest.mark.parametrize("name", ["odd", "nogate", "tiny"])
def test_fused_model_through_the_triton_interpreter(monkeypatch, name):
    """The whole fused path with the ops' Triton kernels (not their CPU paths) under the
    interpreter: the norms read z and the convolutions xBC as slices of in_proj's output, as on
    CUDA. Against the PyTorch model, in float32: the interpreter truncates float32 -> 16-bit casts
    where a GPU rounds to nearest even, which biases a 16-bit model's drift (the bf16 model is
    compared on the GPU)."""
    ref_model = Mamba2LM.from_config(dataclasses.replace(CONFIGS[name], n_layer=2)).eval()
    ids = torch.randint(0, 64, (2, 9), generator=torch.Generator().manual_seed(1))
    got, want = _through_the_kernels(monkeypatch, ref_model, ids, 6)
    _assert_same_run(name, got, want, torch.float32)


@pytest.mark.triton
@INTERPRET
def test_fused_mamba1_through_the_triton_interpreter(monkeypatch):
    """Mamba-1's fused path with the Triton kernels under the interpreter: the chunk convolution
    reads x as the transposed slice of in_proj's output. Against the PyTorch model."""
    cfg = dataclasses.replace(MambaConfig.preset("tiny"), n_layer=2)
    ids = torch.randint(0, 256, (2, 9), generator=torch.Generator().manual_seed(4))
    got, want = _through_the_kernels(monkeypatch, MambaLM.from_config(cfg).eval(), ids, 7)
    _assert_same_run("mamba1", got, want, torch.float32)


def test_fused_inference_declines_off_cuda():
    t = torch.ones(2)
    assert not fused_inference(t)
    assert not fused_inference(None, t)


# ---- CUDA ----


def _cuda_runs(model, ids, prompt):
    """(fused run under inference_mode, the float32 copy's PyTorch run in grad mode) and the ops
    each called."""
    ref_model = copy.deepcopy(model).float()
    with torch.inference_mode(), _CountSsmscanOps() as fused_calls:
        fused = _prefill_and_decode(model, ids, prompt)
    with torch.enable_grad(), _CountSsmscanOps() as plain_calls:
        plain = _prefill_and_decode(ref_model, ids, prompt)
    plain = (plain[0].detach(), plain[1])
    return fused, plain, fused_calls.calls, plain_calls.calls


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize(
    "name,dtype",
    [*((n, torch.float32) for n in [*CONFIGS, "130m-2-layers"]), ("tiny", torch.bfloat16)],
    ids=[*(f"{n}-fp32" for n in [*CONFIGS, "130m-2-layers"]), "tiny-bf16"],
)
def test_gpu_fused_model_equals_pytorch_model(name, dtype):
    """float32 models (the float32 tolerance: the kernels and their wiring exactly), and a bf16
    model at a size where the bf16 PyTorch model is within the bf16 tolerance of float32 (a
    deeper or longer bf16 run drifts past it on either path: roundings compound)."""
    if name == "130m-2-layers":
        cfg = dataclasses.replace(Mamba2Config.preset("130m"), n_layer=2)
    else:
        cfg = CONFIGS[name]
    model = Mamba2LM.from_config(cfg).to("cuda", dtype).eval()
    length, prompt = (70, 66) if dtype == torch.float32 else (9, 6)
    ids = torch.randint(0, min(cfg.vocab_size, 64), (2, length), device="cuda",
                        generator=torch.Generator("cuda").manual_seed(1))  # fmt: skip
    fused, plain, fused_calls, plain_calls = _cuda_runs(model, ids, prompt)
    assert fused_calls["rms_norm"] > 0 and fused_calls["conv1d_step"] > 0
    assert fused_calls["add_rms_norm"] > 0 and fused_calls["causal_conv1d"] > 0
    assert (fused_calls["gated_rms_norm"] > 0) == cfg.rmsnorm
    assert not any(plain_calls[op] for op in FUSED_OPS)
    _assert_same_run(name, fused, plain, dtype)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_fused_mamba1_model_equals_pytorch_model():
    """Mamba-1's LM: the shared norms, its chunk convolution and conv step (float32: the kernels
    exactly)."""
    model = MambaLM.from_config(MambaConfig.preset("tiny")).to("cuda").eval()
    ids = torch.randint(0, 256, (2, 20), device="cuda")
    fused, plain, fused_calls, _ = _cuda_runs(model, ids, 17)
    assert fused_calls["rms_norm"] > 0 and fused_calls["add_rms_norm"] > 0
    assert fused_calls["causal_conv1d"] > 0 and fused_calls["conv1d_step"] > 0
    _assert_same_run("mamba1", fused, plain, torch.float32)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_fused_decode_step_replays_from_a_cuda_graph():
    """A decode step captured in a CUDA graph (the fused kernels inside) replays the eager step."""
    model = Mamba2LM.from_config(Mamba2Config.preset("tiny")).to("cuda", torch.bfloat16).eval()
    ids = torch.randint(0, 256, (2, 12), device="cuda")
    with torch.inference_mode():
        _, state = model(ids[:, :10])
        token = ids[:, 10:11].clone()
        want, want_state = model(token, state)
        model(token, state)  # warm up: compile the kernels outside the capture
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream), torch.cuda.graph(graph):
            got, got_state = model(token, state)
        torch.cuda.current_stream().wait_stream(stream)
        graph.replay()
        torch.cuda.synchronize()
    _assert_same_run("graph", (got, got_state), (want, want_state), torch.bfloat16)
