"""Benchmark of a transformers Mamba2ForCausalLM on ssmscan (``use_ssmscan``) against
transformers' own path, same weights, side by side.

    python benchmarks/integrations/bench_hf_mamba2.py [--seq-len 2048] [--reps 3] [--threads 2]
    python benchmarks/integrations/bench_hf_mamba2.py --device cuda --dtype bf16 \
        [--mamba-src /tmp/mb/mamba_ssm-2.3.2.post1]

On the CPU transformers runs its torch path. On CUDA it binds mamba-ssm's and causal-conv1d's
functions when its Mamba-2 module is imported, if both import: ``--mamba-src`` (with
``--mamba-build`` and ``--causal-conv1d``, as ``bench_gpu_models.py`` and ``device.sh models``
build them) puts them on ``sys.path`` first. The header says which path transformers took (the
CUDA kernels a forward launched).

The model is the 130m configuration of mamba2-130m (hidden 768, 24 layers, 24 heads of 64,
state 128, one group, chunk 256, vocabulary 50288), built from its config with a seeded random
init (nothing downloaded), float32. Rows:

* prefill: one forward of ``--seq-len`` tokens at batch 1, ``logits_to_keep=1`` (the logits of
  the last token only, as ``generate`` asks for), tokens per second;
* decode: after a 32-token prefill, ``--decode-steps`` one-token forwards with the cache
  (greedy next token fed back, no ``generate`` overhead), at batch 1 and 16, tokens per second
  (batch x steps over the time).

Correctness first: before timing, both models' logits and cached states on a 300-token prefill
and a few decode steps are checked against float64 (the run's dtype's tolerance of
``ssmscan.testing``); a failing check stops the run. Times are medians of ``--reps`` runs after
one warm-up. The mixer share (the part ``use_ssmscan`` replaces) is measured with forward hooks.
"""

from __future__ import annotations

import argparse
import copy
import functools
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

from ssmscan.testing import rel_error, tolerance

# transformers (and ssmscan's adapter, which imports its models) is imported inside the
# functions: on CUDA mamba-ssm must be importable before transformers' Mamba-2 module is.
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}

# At this configuration's random init dt reaches several units and A 24 per head (decays of
# exp(-100) per step inside a chunk); ssmscan's float32 mixer must stay within the op table's
# float32 tolerance of the float64 one there, as everywhere.
TOLERANCE_FACTOR = 1.0
CHECKED_LAYERS = range(0, 24, 4)


def build(seed: int = 0) -> torch.nn.Module:
    import transformers

    cfg = transformers.Mamba2Config(
        vocab_size=50288, hidden_size=768, num_hidden_layers=24, num_heads=24, head_dim=64,
        state_size=128, n_groups=1, expand=2, conv_kernel=4, chunk_size=256,
        tie_word_embeddings=True,
    )  # fmt: skip
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return transformers.Mamba2ForCausalLM(cfg).eval()


def _ids(batch: int, length: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 50288, (batch, length), generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def check(ref: torch.nn.Module, fast: torch.nn.Module) -> tuple[float, float]:
    """Every fourth mixer, on the hidden states it sees in a 300-token forward (a 296-token
    prefill, then 4 decode steps): transformers' and ssmscan's float32 outputs and final states
    against the same mixer in float64; ssmscan's worst within ``TOLERANCE_FACTOR`` x the
    tolerance of the models' dtype (raises otherwise).

    Returns:
        The worst relative error of transformers' and of ssmscan's mixer outputs against
        float64, over the layers.
    """
    import transformers

    dtype = ref.dtype
    ids = _ids(2, 300, 1).to(ref.device)
    inputs: list[torch.Tensor] = []
    hooks = [
        layer.mixer.register_forward_pre_hook(
            lambda _m, args, kw: inputs.append(args[0]), with_kwargs=True
        )
        for layer in ref.backbone.layers
    ]
    ref(ids)
    for h in hooks:
        h.remove()
    worst = [0.0, 0.0]
    for i in CHECKED_LAYERS:
        x = inputs[i]
        exact = copy.deepcopy(fast.backbone.layers[i].mixer).double()
        runs = []
        for mixer, xi in (
            (exact, x.double()),
            (ref.backbone.layers[i].mixer, x),
            (fast.backbone.layers[i].mixer, x),
        ):
            cache = transformers.DynamicCache(config=ref.config)
            ys = [mixer(xi[:, :296], cache=cache)]
            ys += [mixer(xi[:, t : t + 1], cache=cache) for t in range(296, 300)]
            runs.append((torch.cat(ys, dim=1).double(), cache.get_recurrent_state(i).double()))
        (y64, s64), (y_tf, s_tf), (y_ss, s_ss) = runs
        errs = [
            rel_error(y_tf, y64),
            rel_error(s_tf, s64),
            rel_error(y_ss, y64),
            rel_error(s_ss, s64),
        ]
        worst = [max(worst[0], *errs[:2]), max(worst[1], *errs[2:])]
    if not worst[1] <= TOLERANCE_FACTOR * tolerance(dtype):
        raise AssertionError(
            f"ssmscan's mixers: error {worst[1]:.2e} vs transformers' {worst[0]:.2e}"
        )
    return worst[0], worst[1]


def _median(run, reps: int) -> float:
    """Median of ``reps`` calls of ``run`` (each returns its own elapsed seconds), after one."""
    run()  # warm-up
    return statistics.median(run() for _ in range(reps))


class MixerTimer:
    """Wall time spent inside the model's mixers (forward pre/post hooks)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.total = 0.0
        self._t0 = 0.0
        self.handles = []
        for layer in model.backbone.layers:
            self.handles.append(layer.mixer.register_forward_pre_hook(self._start))
            self.handles.append(layer.mixer.register_forward_hook(self._stop))

    def _start(self, *_: object) -> None:
        self._t0 = time.perf_counter()

    def _stop(self, *_: object) -> None:
        self.total += time.perf_counter() - self._t0

    def reset(self) -> None:
        self.total = 0.0

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


def _sync(model: torch.nn.Module) -> None:
    if model.device.type == "cuda":
        torch.cuda.synchronize(model.device)


@torch.no_grad()
def prefill(model: torch.nn.Module, ids: torch.Tensor, on_start=None) -> float:
    if on_start is not None:
        on_start()
    _sync(model)
    t0 = time.perf_counter()
    model(ids.to(model.device), use_cache=True, logits_to_keep=1)
    _sync(model)
    return time.perf_counter() - t0


@torch.no_grad()
def decode(model: torch.nn.Module, batch: int, steps: int, on_start=None) -> float:
    """Seconds of ``steps`` one-token forwards after a 32-token prefill (not timed)."""
    out = model(_ids(batch, 32, 2).to(model.device), use_cache=True, logits_to_keep=1)
    token, cache = out.logits.argmax(-1), out.cache
    if on_start is not None:
        on_start()
    _sync(model)
    t0 = time.perf_counter()
    for _ in range(steps):
        out = model(token, cache=cache, use_cache=True)
        token = out.logits.argmax(-1)
    _sync(model)
    return time.perf_counter() - t0


@torch.no_grad()
def transformers_path(model: torch.nn.Module) -> str:
    """Which kernels transformers' own model ran: one short CUDA forward, its kernel names."""
    if model.device.type != "cuda":
        return "torch (CPU)"
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        model(_ids(1, 300, 3).to(model.device))
        _sync(model)
    names = " ".join(e.key for e in prof.key_averages())
    used = [k for k in ("chunk_scan", "causal_conv1d") if k in names]
    return f"mamba-ssm kernels ({', '.join(used)})" if used else "torch (no mamba-ssm kernel ran)"


def stage_mamba_ssm(args: argparse.Namespace) -> dict:
    """Make mamba-ssm and causal-conv1d importable (``bench_gpu_models.load_mamba_ssm``), before
    transformers' Mamba-2 module binds its functions; what was found."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_gpu_models import load_mamba_ssm

    _, info = load_mamba_ssm(args)
    return info


def timed(model: torch.nn.Module, run, reps: int) -> tuple[float, float]:
    """(median seconds of ``run``, the mixers' share of one more run's time)."""
    t = _median(run, reps)
    timer = MixerTimer(model)
    wall = run(on_start=timer.reset)
    timer.remove()
    return t, timer.total / wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--decode-steps", type=int, default=32)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2, help="CPU threads (--device cpu)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--dtype", default="fp32", choices=sorted(DTYPES))
    parser.add_argument("--mamba-src", type=Path, default=None,
                        help="unpacked mamba-ssm sdist (CUDA: transformers takes its kernels)")  # fmt: skip
    parser.add_argument("--mamba-build", type=Path, default=Path("/tmp/mbuild"),
                        help="folder holding mamba-ssm's built selective_scan_cuda extension")  # fmt: skip
    parser.add_argument("--causal-conv1d", type=Path, default=Path("/tmp/ccbuild"),
                        help="causal_conv1d/ and its built extension")  # fmt: skip
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device here")
    staged = ""
    if args.mamba_src is not None:
        if args.device != "cuda":
            parser.error("--mamba-src: mamba-ssm's kernels run on CUDA only (--device cuda)")
        info = stage_mamba_ssm(args)
        staged = f", mamba-ssm {info.get('version')} staged ({info.get('error', 'imports')})"
    torch.set_num_threads(args.threads)
    import transformers

    from ssmscan.integrations.transformers import use_ssmscan

    ref = build().to(args.device, DTYPES[args.dtype])
    fast = use_ssmscan(copy.deepcopy(ref))
    err_tf, err_ss = check(ref, fast)
    where = (
        f"CPU {platform.processor() or platform.machine()}, {args.threads} threads"
        if args.device == "cpu"
        else torch.cuda.get_device_name()
    )
    print(
        f"Mamba2ForCausalLM 130m config, {args.dtype}, {where}, torch {torch.__version__}, "
        f"transformers {transformers.__version__}{staged}; transformers' path: "
        f"{transformers_path(ref)}; median of {args.reps}. Worst mixer output error against "
        f"float64: transformers {err_tf:.1e}, ssmscan {err_ss:.1e}"
    )
    print(f"{'row':<22} {'transformers':>14} {'ssmscan':>14} {'speedup':>8}  mixer share (tf / ss)")
    prompt = _ids(1, args.seq_len, 0)
    steps = args.decode_steps
    rows = [(f"prefill L={args.seq_len}", functools.partial(prefill, ids=prompt), args.seq_len)]
    for batch in (1, 16):
        step = functools.partial(decode, batch=batch, steps=steps)
        rows.append((f"decode batch {batch}", step, batch * steps))
    for name, run, tokens in rows:
        t_ref, share_ref = timed(ref, functools.partial(run, ref), args.reps)
        t_fast, share_fast = timed(fast, functools.partial(run, fast), args.reps)
        print(
            f"{name:<22} {tokens / t_ref:>10.1f} t/s {tokens / t_fast:>10.1f} t/s "
            f"{t_ref / t_fast:>7.2f}x  {share_ref:.0%} / {share_fast:.0%}"
        )


if __name__ == "__main__":
    main()
