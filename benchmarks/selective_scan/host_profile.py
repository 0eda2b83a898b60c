"""Where an eager call's host time goes: cProfile over repeated calls of our ops (through the
dispatcher, as the benchmark calls them) at one shape, the top functions by own time and by
cumulative time.

    PYTHONPATH=src python benchmarks/selective_scan/host_profile.py [B D L N] [--dtype bf16]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats

import bench_gpu
import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("shape", nargs="*", type=int, default=[1, 1536, 4096, 16])
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--top", type=int, default=28)
    a = ap.parse_args()
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[a.dtype]
    kw = bench_gpu.make(*a.shape, dtype)
    dout = torch.randn_like(kw["u"])
    for name, fn in (
        ("fwd", lambda: bench_gpu.ours_fwd(kw)),
        ("f+b", lambda: bench_gpu.ours_fwd_bwd(kw, dout)),
    ):
        for _ in range(10):
            fn()
        torch.cuda.synchronize()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(a.calls):
            fn()
        prof.disable()
        torch.cuda.synchronize()
        for key in ("tottime", "cumulative"):
            s = io.StringIO()
            pstats.Stats(prof, stream=s).sort_stats(key).print_stats(a.top)
            text = s.getvalue().replace("/opt/torch/.venv/lib/python3.12/site-packages/", "")
            print(f"=== {name} {a.dtype} {a.shape} by {key}, {a.calls} calls ===\n{text}")


if __name__ == "__main__":
    main()
