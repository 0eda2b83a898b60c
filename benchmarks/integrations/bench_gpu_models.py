"""End-to-end benchmark of ssmscan's Mamba-1 and Mamba-2 language models against mamba-ssm's
``MambaLMHeadModel``: same configuration, same weights, side by side in one process.

    python benchmarks/integrations/bench_gpu_models.py [--models mamba2-130m,mamba1-130m ...]
        [--mamba-src DIR] [--mamba-build DIR] [--causal-conv1d DIR] [--out results.json]

Models (``--models``, ``<family>-<preset>``): ``mamba2-*`` is ``ssmscan.models.Mamba2LM`` beside
``MambaLMHeadModel`` with ``ssm_cfg={"layer": "Mamba2"}``; ``mamba1-*`` is ``MambaLM`` beside its
Mamba-1 layers; the presets are those of ``Mamba2Config`` / ``MambaConfig`` (the released
checkpoints' sizes), built from a seeded random init (nothing downloaded). ssmscan's model is
built, cast to ``--dtype`` and its state dict loaded into mamba-ssm's (our names are mamba-ssm's
without ``backbone.``; ``load_state_dict(strict=True)``), so both hold the same weights. mamba-ssm
runs its default paths: ``fused_add_norm`` (its Triton RMSNorm), and its fused prefill
(``use_mem_eff_path`` / ``use_fast_path``) where causal-conv1d imports; Mamba-2's chunk size is
mamba-ssm's 256, ssmscan's the config's (None: its planner chooses; ``--ssmscan-chunk-size``).

Correctness first. Before a model is timed, ssmscan's model in float32 holding the same (rounded)
weights runs a ``--gate-len``-token prompt (batch 2) followed by ``--gate-steps`` fixed tokens.
Every layer's mixer of each library, in ``--dtype``, then runs on the normed hidden states that
layer saw there (rounded to ``--dtype``): without a cache, as a cached prefill, and one step at a
time from that cache (ssmscan's steps in place, as timed). Each output must be within
``ssmscan.testing.tolerance(dtype)`` of the float32 mixer on the same inputs, or the run stops
(exit status 1) with nothing timed. The whole
model's logits against the float32 model's are reported beside, not gated: the op tolerance
bounds one layer's roundings, not a deep model's (ssmscan's own bf16 Mamba-2 130m logits sit at
2.0e-2 of float32 on CPU, layers at 7e-3, against 1.5e-2). That the two models are one model is
checked in float32, where their logits agree to 5e-7 at the tiny presets
(``tests/integrations/test_bench_gpu_models.py``, on CPU).

Rows, all under ``torch.inference_mode`` (as mamba-ssm's ``generate``):

* ``prefill``: one forward of ``--seq-len`` tokens at each ``--prefill-batches`` size, full logits
  for both (ssmscan's forward has no last-token-only option; it also returns the state after
  the prompt, which mamba-ssm's forward without a cache does not), tokens/s = batch * L / time,
  and the memory the forward allocates beyond the weights (``extra_mib``);
* ``decode``: after a ``--prompt-len``-token prefill into each library's cache (not timed),
  ``--decode-steps`` one-token steps, the greedy token fed back, each library's cache updated in
  place (ssmscan: ``model(ids, state, inplace=True)``; mamba-ssm: ``InferenceParams``), at each
  ``--decode-batches`` size, tokens/s = batch * steps / time;
* ``decode-graph`` (CUDA, unless ``--no-graph``): the same steps replayed from CUDA graphs
  (mamba-ssm: its ``update_graph_cache``, what ``generate(cg=True)`` uses; ssmscan: one in-place
  step captured with its state in static buffers).

Times: ``torch.cuda.synchronize`` around each timed region, median of ``--reps`` after one
warm-up. mamba-ssm comes from its unpacked sdist (``--mamba-src``) and its ``selective_scan_cuda``
extension built into ``--mamba-build`` (both put on ``sys.path``; ``mamba_ssm/__init__.py`` is
not run); causal-conv1d from ``--causal-conv1d`` (``build_causal_conv1d.sh`` beside this file
builds it). Without mamba-ssm ssmscan is timed alone and the output says why; without
``selective_scan_cuda`` the Mamba-1 comparison is left out. ``--device cpu`` is a smoke run of
the whole harness (mamba-ssm's Triton kernels under ``TRITON_INTERPRET=1``, its Mamba-1 scan on
its ``selective_scan_ref``) at tiny presets; its times mean nothing, and under the interpreter
mamba-ssm's Mamba-2 scan is wrong in bfloat16 (use ``--dtype fp32``).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import functools
import importlib
import importlib.machinery
import json
import math
import os
import platform
import re
import statistics
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path

import torch

if not torch.cuda.is_available():  # before any Triton kernel is defined (mamba-ssm's or ours)
    os.environ.setdefault("TRITON_INTERPRET", "1")

import ssmscan
from ssmscan.models import Mamba2Config, Mamba2LM, MambaConfig, MambaLM, MambaState
from ssmscan.testing import rel_error, tolerance
from ssmscan.testing.triton_interpreter import patch_for_autotuned_kernels_on_cpu

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
FAMILIES: dict[str, tuple[type, type]] = {"mamba1": (MambaConfig, MambaLM),
                                          "mamba2": (Mamba2Config, Mamba2LM)}  # fmt: skip
MAMBA_SSM_CHUNK = 256  # mamba-ssm's Mamba2 default


class GateError(AssertionError):
    """A library's logits are not within the dtype's tolerance of the float32 reference."""


# ---------------------------------------------------------------------------------------------
# arguments and configs


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated ints; got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive ints; got {text!r}")
    return values


def model_spec(name: str) -> tuple[str, str]:
    """``"mamba2-130m"`` -> ``("mamba2", "130m")``; the preset must exist for the family."""
    family, _, preset = name.partition("-")
    if family not in FAMILIES:
        raise argparse.ArgumentTypeError(
            f"model {name!r}: family must be one of {sorted(FAMILIES)} (e.g. mamba2-130m)"
        )
    presets = FAMILIES[family][0].PRESETS
    if preset not in presets:
        raise argparse.ArgumentTypeError(
            f"model {name!r}: unknown {family} preset {preset!r}; known: {sorted(presets)}"
        )
    return family, preset


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="mamba2-130m,mamba1-130m,mamba2-2.7b,mamba1-2.8b",
                    help="comma-separated <family>-<preset>")  # fmt: skip
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    ap.add_argument("--seq-len", type=int, default=2048, help="prefill length")
    ap.add_argument("--prefill-batches", type=_int_list, default=[1, 8])
    ap.add_argument("--decode-batches", type=_int_list, default=[1, 16])
    ap.add_argument("--prompt-len", type=int, default=32, help="prefill before the decode rows")
    ap.add_argument("--decode-steps", type=int, default=64)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--gate-len", type=int, default=299, help="prompt of the correctness gate")
    ap.add_argument("--gate-steps", type=int, default=4, help="decode steps of the gate")
    ap.add_argument("--no-graph", action="store_true", help="leave out the decode-graph rows")
    ap.add_argument("--check-only", action="store_true", help="run the gates, time nothing")
    ap.add_argument("--ssmscan-chunk-size", type=int, default=None,
                    help="ssmscan's Mamba-2 chunk size (default: the planner's)")  # fmt: skip
    ap.add_argument("--mamba-src", type=Path,
                    default=Path(os.environ.get("MAMBA_SSM_SRC", "/tmp/mb/mamba_ssm-2.3.2.post1")),
                    help="unpacked mamba-ssm sdist (holds mamba_ssm/)")  # fmt: skip
    ap.add_argument("--mamba-build", type=Path, default=Path("/tmp/mbuild"),
                    help="folder holding the built selective_scan_cuda extension")  # fmt: skip
    ap.add_argument("--causal-conv1d", type=Path, default=Path("/tmp/ccbuild"),
                    help="causal_conv1d/ and its extension (build_causal_conv1d.sh)")  # fmt: skip
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = ap.parse_args(argv)
    try:
        args.models = [model_spec(m) for m in args.models.split(",") if m]
    except argparse.ArgumentTypeError as e:
        ap.error(f"--models: {e}")
    for name in ("seq_len", "prompt_len", "decode_steps", "reps", "gate_len", "gate_steps"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1; got {getattr(args, name)}")
    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: no CUDA device here (--device cpu is a smoke run)")
    return args


def ssmscan_config(family: str, preset: str, chunk_size: int | None = None):
    """The preset's ``MambaConfig`` / ``Mamba2Config`` (Mamba-2 with ``chunk_size`` when given)."""
    cfg = FAMILIES[family][0].preset(preset)
    if family == "mamba2" and chunk_size is not None:
        cfg = dataclasses.replace(cfg, chunk_size=chunk_size)
    return cfg


def mamba_ssm_config_kwargs(cfg: MambaConfig | Mamba2Config) -> dict:
    """mamba-ssm's ``MambaConfig(**kwargs)`` for the model ``cfg`` describes, field by field.

    mamba-ssm fixes every norm's epsilon at 1e-5 (``MixerModel``'s ``norm_epsilon``, ``Mamba2``'s
    gated norm): a config differing there is refused (ValueError).
    """
    if not isinstance(cfg, (MambaConfig, Mamba2Config)):
        raise TypeError(f"expected a MambaConfig or Mamba2Config; got {type(cfg).__name__}")
    if cfg.rms_norm_eps != 1e-5:
        raise ValueError(f"mamba-ssm's norms use eps 1e-5; the config has {cfg.rms_norm_eps}")
    if isinstance(cfg, Mamba2Config):
        ssm_cfg = dict(
            layer="Mamba2", d_state=cfg.d_state, d_conv=cfg.d_conv, expand=cfg.expand,
            headdim=cfg.headdim, ngroups=cfg.ngroups, A_init_range=tuple(cfg.A_init_range),
            D_has_hdim=cfg.D_has_hdim, rmsnorm=cfg.rmsnorm, norm_before_gate=False,
            dt_min=cfg.dt_min, dt_max=cfg.dt_max, dt_init_floor=cfg.dt_init_floor,
            dt_limit=tuple(cfg.dt_limit), bias=cfg.bias, conv_bias=cfg.conv_bias,
            conv_init=cfg.conv_init, chunk_size=MAMBA_SSM_CHUNK,
        )  # fmt: skip
    else:
        ssm_cfg = dict(
            layer="Mamba1", d_state=cfg.d_state, d_conv=cfg.d_conv, expand=cfg.expand,
            dt_rank=cfg.dt_rank, dt_min=cfg.dt_min, dt_max=cfg.dt_max, dt_init=cfg.dt_init,
            dt_scale=cfg.dt_scale, dt_init_floor=cfg.dt_init_floor, conv_bias=cfg.conv_bias,
            bias=cfg.bias,
        )  # fmt: skip
    return dict(
        d_model=cfg.d_model, d_intermediate=0, n_layer=cfg.n_layer, vocab_size=cfg.vocab_size,
        ssm_cfg=ssm_cfg, rms_norm=True, residual_in_fp32=cfg.residual_in_fp32,
        fused_add_norm=True, pad_vocab_size_multiple=cfg.pad_vocab_size_multiple,
        tie_embeddings=cfg.tie_embeddings,
    )  # fmt: skip


def mamba_ssm_state_dict(ours: torch.nn.Module) -> dict[str, torch.Tensor]:
    """ssmscan's state dict under mamba-ssm's names: ``backbone.`` before all but ``lm_head``."""
    return {(k if k.startswith("lm_head.") else f"backbone.{k}"): v
            for k, v in ours.state_dict().items()}  # fmt: skip


# ---------------------------------------------------------------------------------------------
# mamba-ssm from its source


def _extension_stub(name: str) -> types.ModuleType:
    stub = types.ModuleType(name)

    def __getattr__(attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise RuntimeError(f"{name}.{attr}: the extension was not built (see --mamba-build)")

    stub.__getattr__ = __getattr__  # type: ignore[method-assign]
    return stub


def load_mamba_ssm(args: argparse.Namespace) -> tuple[types.SimpleNamespace | None, dict]:
    """Import mamba-ssm's ``MambaLMHeadModel`` from ``--mamba-src`` (with ``--mamba-build`` and
    ``--causal-conv1d`` on ``sys.path``). Returns (its names, or None; what was found)."""
    info: dict = {"mamba_src": str(args.mamba_src)}
    for folder in (args.causal_conv1d, args.mamba_build):
        if folder.is_dir() and str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
    try:
        import causal_conv1d

        info["causal_conv1d"] = getattr(causal_conv1d, "__version__", "unknown")
    except Exception as e:  # an ImportError, or the extension failing to load
        info["causal_conv1d"] = None
        info["causal_conv1d_error"] = f"{type(e).__name__}: {e}"
    try:
        import selective_scan_cuda  # noqa: F401

        info["selective_scan_cuda"] = True
    except ImportError as e:
        info["selective_scan_cuda"] = False
        info["selective_scan_cuda_error"] = f"{type(e).__name__}: {e}"
        sys.modules["selective_scan_cuda"] = _extension_stub("selective_scan_cuda")
    pkg_dir = args.mamba_src / "mamba_ssm"
    init = pkg_dir / "__init__.py"
    if not init.is_file():
        info["error"] = f"no mamba_ssm package under {args.mamba_src} (see --mamba-src)"
        return None, info
    found = re.search(r'__version__\s*=\s*"([^"]+)"', init.read_text())
    info["version"] = found.group(1) if found else "unknown"
    if "mamba_ssm" not in sys.modules:  # the package without its __init__ (CUDA imports)
        pkg = types.ModuleType("mamba_ssm")
        pkg.__path__ = [str(pkg_dir)]
        pkg.__spec__ = importlib.machinery.ModuleSpec("mamba_ssm", None, is_package=True)
        pkg.__spec__.submodule_search_locations = [str(pkg_dir)]
        sys.modules["mamba_ssm"] = pkg
    try:
        lm = importlib.import_module("mamba_ssm.models.mixer_seq_simple")
        config = importlib.import_module("mamba_ssm.models.config_mamba")
        generation = importlib.import_module("mamba_ssm.utils.generation")
    except Exception as e:
        info["error"] = f"mamba-ssm does not import: {type(e).__name__}: {e}"
        return None, info
    if args.device == "cpu" and not info["selective_scan_cuda"]:
        # its own pure-PyTorch reference in place of the CUDA scan (smoke runs only)
        interface = importlib.import_module("mamba_ssm.ops.selective_scan_interface")
        simple = importlib.import_module("mamba_ssm.modules.mamba_simple")
        simple.selective_scan_fn = interface.selective_scan_ref
        info["mamba1_scan"] = "selective_scan_ref (CPU smoke run)"
    return types.SimpleNamespace(
        MambaLMHeadModel=lm.MambaLMHeadModel,
        MambaConfig=config.MambaConfig,
        InferenceParams=generation.InferenceParams,
        update_graph_cache=generation.update_graph_cache,
    ), info


# ---------------------------------------------------------------------------------------------
# the two models


def build_pair(family: str, cfg, mamba, info: dict, device: torch.device, dtype: torch.dtype):
    """(ssmscan's model in ``dtype``, mamba-ssm's with the same weights or None, ssmscan's in
    float32 holding the same rounded weights: the gate's reference)."""
    with torch.device(device):
        model = FAMILIES[family][1](cfg).eval()
    ours = model.to(dtype)
    ref = copy.deepcopy(ours).float()
    if mamba is None:
        return ours, None, ref
    kwargs = mamba_ssm_config_kwargs(cfg)
    if family == "mamba2":
        kwargs["ssm_cfg"]["use_mem_eff_path"] = info.get("causal_conv1d") is not None
    theirs = mamba.MambaLMHeadModel(mamba.MambaConfig(**kwargs), device=device, dtype=dtype)
    theirs.load_state_dict(mamba_ssm_state_dict(ours), strict=True)
    return ours, theirs.eval(), ref


class Runner:
    """One library's prefill, cached prefill and decode step behind one interface."""

    def __init__(self, name: str, model: torch.nn.Module, mamba=None) -> None:
        self.name, self.model, self.mamba = name, model, mamba

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Full logits (batch, L, vocab) of a forward without a cache."""
        if self.mamba is None:
            return self.model(ids)[0]
        return self.model(ids).logits[..., : self.model.config.vocab_size]

    def prefill(self, ids: torch.Tensor, max_seqlen: int):
        """(last-token logits (batch, vocab), cache) of a prefill into the library's cache."""
        if self.mamba is None:
            logits, state = self.model(ids)
            return logits[:, -1], state
        params = self.mamba.InferenceParams(max_seqlen=max_seqlen, max_batch_size=ids.shape[0])
        logits = self.model(ids, inference_params=params, num_last_tokens=1).logits
        params.seqlen_offset += ids.shape[1]
        return logits[:, -1, : self.model.config.vocab_size], params

    def mixers(self) -> list[torch.nn.Module]:
        """Each layer's mixer, in order."""
        layers = self.model.layers if self.mamba is None else self.model.backbone.layers
        return [layer.mixer for layer in layers]

    def mixer_outputs(self, mixer: torch.nn.Module, x: torch.Tensor, length: int):
        """One mixer on normed hidden states x (batch, length + k, d_model): (output without a
        cache over ``x[:, :length]``, output of a cached prefill over the same, outputs of k
        one-token steps from that cache over the rest, (batch, k, d_model))."""
        full = mixer(x[:, :length])
        if self.mamba is None:
            full, conv, ssm = full
            cached, conv, ssm = mixer(x[:, :length])
            steps = []
            for t in range(length, x.shape[1]):
                out, conv, ssm = mixer(x[:, t : t + 1], conv, ssm, inplace=True)
                steps.append(out)
        else:
            params = self.mamba.InferenceParams(max_seqlen=x.shape[1], max_batch_size=x.shape[0])
            cached = mixer(x[:, :length], inference_params=params)
            params.seqlen_offset = length
            steps = []
            for t in range(length, x.shape[1]):
                steps.append(mixer(x[:, t : t + 1], inference_params=params))
                params.seqlen_offset += 1
        return full, cached, torch.cat(steps, 1)

    def step(self, token: torch.Tensor, cache):
        """(logits (batch, vocab), cache) of one decode step of ``token`` (batch, 1)."""
        if self.mamba is None:
            logits, cache = self.model(token, cache, inplace=True)
            return logits[:, -1], cache
        logits = self.model(token, inference_params=cache, num_last_tokens=1).logits
        cache.seqlen_offset += 1
        return logits[:, -1, : self.model.config.vocab_size], cache


# ---------------------------------------------------------------------------------------------
# correctness gate


def check_within(model_name: str, errors: dict[str, float], dtype: torch.dtype) -> None:
    """Raise ``GateError`` naming every check whose error exceeds ``tolerance(dtype)``."""
    tol = tolerance(dtype)
    bad = {k: v for k, v in errors.items() if not v <= tol}
    if bad:
        detail = ", ".join(f"{k} {v:.2e}" for k, v in bad.items())
        raise GateError(
            f"correctness gate failed for {model_name}: {detail} > {tol:.1e} (the {dtype} "
            f"tolerance of ssmscan.testing, max|x - ref| / max|ref| against the float32 layer "
            f"on the same inputs and weights); nothing was timed"
        )


def gate(model_name: str, runners: list[Runner], ref: torch.nn.Module, length: int, steps: int,
         dtype: torch.dtype) -> tuple[dict[str, float], dict[str, float]]:  # fmt: skip
    """The correctness gate (the module docstring's "Correctness first").

    Returns:
        (gated, reported): the worst over the layers of each library's mixer outputs (prefill,
        cached prefill, decode) against the float32 mixer; the whole model's logits against the
        float32 model, and ``ssmscan~mamba-ssm``. Raises ``GateError`` when a gated error
        exceeds ``tolerance(dtype)``.
    """
    device = next(ref.parameters()).device
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, ref.config.vocab_size, (2, length + steps), generator=g).to(device)
    inputs: list[torch.Tensor] = []
    hooks = [layer.mixer.register_forward_pre_hook(lambda _m, a: inputs.append(a[0]))
             for layer in ref.layers]  # fmt: skip
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        expected = ref(ids)[0]
        for h in hooks:
            h.remove()
        gated: dict[str, float] = {}
        for i, hidden in enumerate(inputs):
            x = hidden.to(dtype)  # each library's input, rounded; the reference reads the same
            want = ref.layers[i].mixer(x.to(hidden.dtype))[0]
            for r in runners:
                full, cached, stepped = r.mixer_outputs(r.mixers()[i], x, length)
                for what, got, ref_part in (
                    ("prefill", full, want[:, :length]),
                    ("cached prefill", cached, want[:, :length]),
                    ("decode", stepped, want[:, length:]),
                ):
                    key = f"{r.name} layers {what}"
                    gated[key] = max(gated.get(key, 0.0), rel_error(got, ref_part))
    reported: dict[str, float] = {}
    outputs = []
    for r in runners:
        full = r.forward(ids[:, :length])
        logits, cache = r.prefill(ids[:, :length], max_seqlen=length + steps)
        decoded = []
        for i in range(steps):
            out, cache = r.step(ids[:, length + i : length + i + 1], cache)
            decoded.append(out)
        decoded = torch.stack(decoded, 1)
        reported[f"{r.name} logits prefill"] = rel_error(full, expected[:, :length])
        reported[f"{r.name} logits cached prefill"] = rel_error(logits, expected[:, length - 1])
        reported[f"{r.name} logits decode"] = rel_error(decoded, expected[:, length:])
        outputs.append(torch.cat([full, decoded], 1))
    if len(outputs) == 2:
        reported["logits ssmscan~mamba-ssm"] = rel_error(outputs[0], outputs[1])
    check_within(model_name, gated, dtype)
    return gated, reported


# ---------------------------------------------------------------------------------------------
# timing


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_seconds(run: Callable[[], float], reps: int) -> float:
    """Median of ``reps`` calls of ``run`` (each returns its own timed seconds), after one."""
    run()
    return statistics.median(run() for _ in range(reps))


def time_prefill(r: Runner, ids: torch.Tensor, reps: int) -> float:
    device = ids.device

    def run() -> float:
        _sync(device)
        t0 = time.perf_counter()
        r.forward(ids)
        _sync(device)
        return time.perf_counter() - t0

    return median_seconds(run, reps)


def time_decode(r: Runner, prompt: torch.Tensor, steps: int, reps: int) -> float:
    device = prompt.device

    def run() -> float:
        logits, cache = r.prefill(prompt, max_seqlen=prompt.shape[1] + steps + 1)
        token = logits.argmax(-1, keepdim=True)
        _sync(device)
        t0 = time.perf_counter()
        for _ in range(steps):
            logits, cache = r.step(token, cache)
            token = logits.argmax(-1, keepdim=True)
        _sync(device)
        return time.perf_counter() - t0

    return median_seconds(run, reps)


def _copy_state(dst: MambaState, src: MambaState) -> None:
    for d, s in zip(dst.conv_states + dst.ssm_states, src.conv_states + src.ssm_states):
        d.copy_(s)


def _ours_graph_step(r: Runner, state: MambaState):
    """A CUDA graph of one ssmscan decode step whose state lives in static buffers, which the
    step's kernels update in place (``inplace=True``, Note [in-place decode]). Returns
    (step(token) -> logits (batch, vocab), the static state)."""
    static = MambaState(tuple(t.clone() for t in state.conv_states),
                        tuple(t.clone() for t in state.ssm_states))  # fmt: skip
    ids = torch.zeros(state.batch_size, 1, dtype=torch.long, device=static.ssm_states[0].device)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            r.model(ids, static, inplace=True)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        logits, _ = r.model(ids, static, inplace=True)
        logits = logits[:, -1]

    def step(token: torch.Tensor) -> torch.Tensor:
        ids.copy_(token)
        graph.replay()
        return logits

    return step, static


def time_decode_graph(r: Runner, prompt: torch.Tensor, steps: int, reps: int) -> float:
    """Decode steps replayed from CUDA graphs, each library its own way (see the docstring)."""
    batch, plen = prompt.shape
    max_seqlen = plen + steps + 1
    if r.mamba is None:
        _, state = r.prefill(prompt, max_seqlen)
        step, static = _ours_graph_step(r, state)
    else:
        cache = r.mamba.update_graph_cache(r.model, None, batch, plen, max_seqlen)
        params = cache.inference_params
        position_ids = torch.zeros(batch, 1, dtype=torch.long, device=prompt.device)

    def run() -> float:
        if r.mamba is None:
            logits, state = r.prefill(prompt, max_seqlen)
            _copy_state(static, state)
            do_step = step
        else:
            params.reset(max_seqlen, batch)
            logits = r.model(prompt, inference_params=params, num_last_tokens=1).logits[:, -1]
            params.seqlen_offset = plen

            def do_step(token: torch.Tensor) -> torch.Tensor:
                out = cache.run(token, position_ids, params.seqlen_offset)[:, -1]
                params.seqlen_offset += 1
                return out

        vocab = r.model.config.vocab_size
        token = logits[..., :vocab].argmax(-1, keepdim=True)
        _sync(prompt.device)
        t0 = time.perf_counter()
        for _ in range(steps):
            token = do_step(token)[..., :vocab].argmax(-1, keepdim=True)
        _sync(prompt.device)
        return time.perf_counter() - t0

    return median_seconds(run, reps)


def _extra_mib(device: torch.device, run: Callable[[], object]) -> float | None:
    """Peak memory ``run`` allocates beyond what is live before it (MiB); None off CUDA."""
    if device.type != "cuda":
        return None
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    run()
    torch.cuda.synchronize(device)
    return (torch.cuda.max_memory_allocated(device) - before) / 2**20


def bench_model(model_name: str, runners: list[Runner], vocab: int, args, device) -> list[dict]:
    """Every row for one model, each library in turn; a row that raises is recorded with its
    error (the others still run)."""
    rows = []
    g = torch.Generator().manual_seed(0)

    def ids(batch: int, length: int) -> torch.Tensor:
        return torch.randint(0, vocab, (batch, length), generator=g).to(device)

    cases = [("prefill", b, args.seq_len) for b in args.prefill_batches]
    cases += [("decode", b, args.decode_steps) for b in args.decode_batches]
    if device.type == "cuda" and not args.no_graph:
        cases += [("decode-graph", b, args.decode_steps) for b in args.decode_batches]
    for row, batch, length in cases:
        inputs = ids(batch, args.seq_len if row == "prefill" else args.prompt_len)
        for r in runners:
            entry = {"model": model_name, "library": r.name, "row": row, "batch": batch}
            entry["seq_len" if row == "prefill" else "steps"] = length
            try:
                if row == "prefill":
                    seconds = time_prefill(r, inputs, args.reps)
                    entry["extra_mib"] = _extra_mib(device, functools.partial(r.forward, inputs))
                elif row == "decode":
                    seconds = time_decode(r, inputs, length, args.reps)
                else:
                    seconds = time_decode_graph(r, inputs, length, args.reps)
                entry["ms"] = seconds * 1e3
                entry["tokens_per_s"] = batch * length / seconds
            except Exception as e:  # recorded, the run goes on
                entry["error"] = f"{type(e).__name__}: {e}"
            rows.append(entry)
            print(json.dumps(entry), flush=True)
    return rows


# ---------------------------------------------------------------------------------------------
# report


def environment(device: torch.device, info: dict) -> dict:
    env = {"torch": torch.__version__, "ssmscan": ssmscan.__version__,
           "python": platform.python_version(), "cuda": torch.version.cuda,
           "device": (torch.cuda.get_device_name(device) if device.type == "cuda"
                      else platform.processor() or platform.machine())}  # fmt: skip
    try:
        import triton

        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = None
    env["mamba_ssm"] = info
    return env


def table(rows: list[dict]) -> str:
    """Rows side by side: tokens/s of each library and ssmscan's speed-up."""
    keyed: dict[tuple, dict[str, dict]] = {}
    for e in rows:
        key = (e["model"], e["row"], e["batch"], e.get("seq_len", e.get("steps")))
        keyed.setdefault(key, {})[e["library"]] = e

    def cell(e: dict | None) -> str:
        if e is None:
            return "-"
        return "error" if "error" in e else f"{e['tokens_per_s']:.0f}"

    lines = [f"{'model':<13} {'row':<13} {'batch':>5} {'L/steps':>7} {'ssmscan t/s':>12} "
             f"{'mamba-ssm t/s':>14} {'speed-up':>9}"]  # fmt: skip
    for (model, row, batch, n), libs in keyed.items():
        ours, theirs = libs.get("ssmscan"), libs.get("mamba-ssm")
        ratio = "-"
        if ours and theirs and "error" not in ours and "error" not in theirs:
            ratio = f"{theirs['ms'] / ours['ms']:.2f}x"
        lines.append(f"{model:<13} {row:<13} {batch:>5} {n:>7} {cell(ours):>12} "
                     f"{cell(theirs):>14} {ratio:>9}")  # fmt: skip
    return "\n".join(lines)


def _plain(value):
    """``value`` with non-finite floats as strings (JSON has no inf) and tuples as lists."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _save(results: dict, out: Path | None) -> None:
    if out is not None:  # after every model: a run cut short keeps what it measured
        out.write_text(json.dumps(results, indent=1))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    device = torch.device(args.device)
    dtype = DTYPES[args.dtype]
    t0 = time.perf_counter()

    def stamp(text: str) -> None:
        print(f"[{time.perf_counter() - t0:.0f} s] {text}", flush=True)

    if device.type == "cpu":
        patch_for_autotuned_kernels_on_cpu()
    mamba, info = load_mamba_ssm(args)
    env = environment(device, info)
    print(json.dumps({"environment": env}), flush=True)
    if mamba is None:
        print(f"mamba-ssm not importable ({info['error']}): timing ssmscan alone", flush=True)
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    settings["models"] = [f"{family}-{preset}" for family, preset in args.models]
    results: dict = {"environment": env, "args": settings, "models": {}, "gates": {}, "rows": []}
    status = 0
    for family, preset in args.models:
        name = f"{family}-{preset}"
        cfg = ssmscan_config(family, preset, args.ssmscan_chunk_size)
        use_mamba = mamba
        if family == "mamba1" and mamba is not None and not info["selective_scan_cuda"]:
            if device.type == "cuda":
                print(f"{name}: mamba-ssm's selective_scan_cuda is not built "
                      f"({args.mamba_build}): ssmscan alone", flush=True)  # fmt: skip
                use_mamba = None
        stamp(f"{name}: building")
        ours, theirs, ref = build_pair(family, cfg, use_mamba, info, device, dtype)
        results["models"][name] = {
            "config": _plain(dataclasses.asdict(cfg)),
            "parameters": sum(p.numel() for p in ours.parameters()),
            "mamba_ssm_config": _plain(mamba_ssm_config_kwargs(cfg))
            if theirs is not None
            else None,
            "mamba_ssm_mem_eff_path": info.get("causal_conv1d") is not None,
        }
        runners = [Runner("ssmscan", ours)]
        if theirs is not None:
            runners.append(Runner("mamba-ssm", theirs, use_mamba))
        stamp(f"{name}: correctness gate")
        try:
            with torch.inference_mode():
                gated, reported = gate(name, runners, ref, args.gate_len, args.gate_steps, dtype)
        except GateError as e:
            print(f"GATE FAILED: {e}", flush=True)
            results["gates"][name] = {"failed": str(e)}
            status = 1
            break
        results["gates"][name] = {"gated": gated, "reported": reported}
        print(json.dumps({"gate": name, "gated": gated, "reported": reported}), flush=True)
        del ref
        if not args.check_only:
            stamp(f"{name}: timing")
            with torch.inference_mode():
                results["rows"] += bench_model(name, runners, cfg.vocab_size, args, device)
        _save(results, args.out)
        del ours, theirs, runners
        if device.type == "cuda":
            torch.cuda.empty_cache()
    stamp("done")
    if results["rows"]:
        print(f"{env['device']}, {args.dtype}, torch {env['torch']}, triton {env['triton']}, "
              f"mamba-ssm {info.get('version') if mamba else 'absent'}, causal-conv1d "
              f"{info.get('causal_conv1d')}; median of {args.reps}")  # fmt: skip
        print(table(results["rows"]))
    _save(results, args.out)
    return status


if __name__ == "__main__":
    sys.exit(main())
