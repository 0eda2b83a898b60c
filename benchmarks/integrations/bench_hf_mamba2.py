"""CPU benchmark of a transformers Mamba2ForCausalLM on ssmscan (``use_ssmscan``) against
transformers' own torch path, same weights, side by side.

    python benchmarks/integrations/bench_hf_mamba2.py [--seq-len 2048] [--reps 3] [--threads 2]

The model is the 130m configuration of mamba2-130m (hidden 768, 24 layers, 24 heads of 64,
state 128, one group, chunk 256, vocabulary 50288), built from its config with a seeded random
init (nothing downloaded), float32. Rows:

* prefill: one forward of ``--seq-len`` tokens at batch 1, ``logits_to_keep=1`` (the logits of
  the last token only, as ``generate`` asks for), tokens per second;
* decode: after a 32-token prefill, ``--decode-steps`` one-token forwards with the cache
  (greedy next token fed back, no ``generate`` overhead), at batch 1 and 16, tokens per second
  (batch x steps over the time).

Correctness first: before timing, both models' logits and cached states on a 300-token prefill
and a few decode steps are checked against each other (float32 tolerance of
``ssmscan.testing``); a failing check stops the run. Times are medians of ``--reps`` runs after
one warm-up. The mixer share (the part ``use_ssmscan`` replaces) is measured with forward hooks.
"""

from __future__ import annotations

import argparse
import copy
import functools
import platform
import statistics
import time

import torch
import transformers

from ssmscan.integrations.transformers import use_ssmscan
from ssmscan.testing import rel_error, tolerance

# At this configuration's random init dt reaches several units and A 24 per head (decays of
# exp(-100) per step inside a chunk); ssmscan's float32 mixer must stay within the op table's
# float32 tolerance of the float64 one there, as everywhere.
TOLERANCE_FACTOR = 1.0
CHECKED_LAYERS = range(0, 24, 4)


def build(seed: int = 0) -> torch.nn.Module:
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
    float32 tolerance (raises otherwise).

    Returns:
        The worst relative error of transformers' and of ssmscan's mixer outputs against
        float64, over the layers.
    """
    ids = _ids(2, 300, 1)
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
    if not worst[1] <= TOLERANCE_FACTOR * tolerance(torch.float32):
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


@torch.no_grad()
def prefill(model: torch.nn.Module, ids: torch.Tensor, on_start=None) -> float:
    if on_start is not None:
        on_start()
    t0 = time.perf_counter()
    model(ids, use_cache=True, logits_to_keep=1)
    return time.perf_counter() - t0


@torch.no_grad()
def decode(model: torch.nn.Module, batch: int, steps: int, on_start=None) -> float:
    """Seconds of ``steps`` one-token forwards after a 32-token prefill (not timed)."""
    out = model(_ids(batch, 32, 2), use_cache=True, logits_to_keep=1)
    token, cache = out.logits.argmax(-1), out.cache
    if on_start is not None:
        on_start()
    t0 = time.perf_counter()
    for _ in range(steps):
        out = model(token, cache=cache, use_cache=True)
        token = out.logits.argmax(-1)
    return time.perf_counter() - t0


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
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    ref = build()
    fast = use_ssmscan(copy.deepcopy(ref))
    err_tf, err_ss = check(ref, fast)
    print(
        f"Mamba2ForCausalLM 130m config, fp32, CPU {platform.processor() or platform.machine()}, "
        f"{args.threads} threads, torch {torch.__version__}, transformers "
        f"{transformers.__version__}; median of {args.reps}. Worst mixer output error against "
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
