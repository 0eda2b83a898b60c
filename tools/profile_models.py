"""Where a built-in language model's GPU time goes: ``torch.profiler`` over a prefill or a decode
step of ``ssmscan.models.MambaLM`` / ``Mamba2LM`` on CUDA, under ``torch.inference_mode`` (the
fused inference path, Note [fused inference]).

For each case it prints the wall time of one call (``torch.cuda.synchronize`` around it), the GPU
time the kernels took (the sum of their device times), and the kernels grouped by name, largest
first, with their count and share. GPU time well under the wall time means the call is bound by
the host (Python, dispatch, launches); GPU time near it, by the kernels listed.

    python tools/profile_models.py [--models mamba2-130m,mamba1-130m] [--batches 1,8]
        [--seq-len 2048] [--decode] [--top 15] [--dtype bf16]

Models are built from their presets with a seeded random init (nothing downloaded). Run it on a
GPU machine (``PYTHONPATH=src`` from a checkout); it needs nothing beyond ssmscan and torch.
"""

from __future__ import annotations

import argparse
import collections
import functools
import time

import torch

from ssmscan.models import Mamba2Config, Mamba2LM, MambaConfig, MambaLM

FAMILIES = {"mamba1": (MambaConfig, MambaLM), "mamba2": (Mamba2Config, Mamba2LM)}
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def build(name: str, dtype: torch.dtype) -> torch.nn.Module:
    """``"mamba2-130m"`` -> that preset's LM on CUDA in ``dtype``, eval mode, seed 0."""
    family, _, preset = name.partition("-")
    if family not in FAMILIES:
        raise SystemExit(f"model {name!r}: family must be one of {sorted(FAMILIES)}")
    config_cls, model_cls = FAMILIES[family]
    torch.manual_seed(0)
    return model_cls.from_config(config_cls.preset(preset)).to("cuda", dtype).eval()


def kernel_table(prof: torch.profiler.profile) -> tuple[float, list[tuple[str, int, float]]]:
    """(total device ms, [(kernel name, count, ms)] largest first) of the profiled kernels."""
    per = collections.defaultdict(lambda: [0, 0.0])
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            per[ev.name][0] += 1
            per[ev.name][1] += ev.device_time_total / 1e3
    rows = sorted(((n, c, ms) for n, (c, ms) in per.items()), key=lambda r: -r[2])
    return sum(r[2] for r in rows), rows


def profile_case(label: str, call, top: int) -> None:
    """Warm ``call`` up, time one call, profile another, print the table."""
    for _ in range(2):
        call()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    call()
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) * 1e3
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        call()
        torch.cuda.synchronize()
    gpu, rows = kernel_table(prof)
    launches = sum(r[1] for r in rows)
    print(f"\n{label}: wall {wall:.2f} ms, GPU {gpu:.2f} ms ({gpu / wall:.0%} busy), "
          f"{launches} kernels")  # fmt: skip
    for name, count, ms in rows[:top]:
        print(f"  {ms:8.3f} ms {ms / gpu:6.1%} {count:5d}x  {name[:100]}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="mamba2-130m,mamba1-130m")
    ap.add_argument("--batches", default="1,8", help="comma-separated batch sizes")
    ap.add_argument("--seq-len", type=int, default=2048, help="prefill length")
    ap.add_argument("--decode", action="store_true", help="also one decode step after a prefill")
    ap.add_argument("--top", type=int, default=15, help="kernels listed per case")
    ap.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("profile_models.py needs a CUDA GPU")
    dtype = DTYPES[a.dtype]
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {a.dtype}")
    for name in a.models.split(","):
        profile_model(name, dtype, [int(b) for b in a.batches.split(",")], a.seq_len, a.decode,
                      a.top)  # fmt: skip
        torch.cuda.empty_cache()


def profile_model(
    name: str, dtype: torch.dtype, batches: list[int], seq_len: int, decode: bool, top: int
) -> None:
    """Every case of one model: prefill at each batch, then (``decode``) one step after it."""
    model = build(name, dtype)
    for batch in batches:
        ids = torch.randint(0, model.config.vocab_size, (batch, seq_len), device="cuda")
        with torch.inference_mode():
            profile_case(f"{name} prefill b{batch} L{seq_len}", functools.partial(model, ids), top)
            if decode:
                _, state = model(ids)
                token = ids[:, -1:].clone()
                step = functools.partial(model, token, state)
                profile_case(f"{name} decode step b{batch}", step, top)


if __name__ == "__main__":
    main()
