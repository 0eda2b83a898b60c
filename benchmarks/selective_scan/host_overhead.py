# ruff: noqa: B023  (lambdas used within the iteration)
"""Host (CPU) time of one eager call of our ops vs mamba-ssm's, and where ours goes (cProfile).

    PYTHONPATH=src:/tmp/mbuild python benchmarks/selective_scan/host_overhead.py

Per shape / dtype: microseconds per call to *enqueue* 30 calls (no synchronization inside; the GPU
work of 30 calls is queued), the wall time per call including the GPU (after a synchronize), and
the top functions of our forward's host path by cumulative time."""

from __future__ import annotations

import cProfile
import io
import pstats
import time

import bench_gpu
import torch


def per_call_us(fn, n=30) -> tuple[float, float]:
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    return (t1 - t0) / n * 1e6, (t2 - t0) / n * 1e6


def main():
    from ssmscan.ops.common import triton_launch

    try:
        import selective_scan_cuda as mb
    except ImportError:
        mb = None
    for shape in [(1, 1536, 4096, 16), (8, 4096, 2048, 16)]:
        for dtype in (torch.float32, torch.bfloat16):
            kw = bench_gpu.make(*shape, dtype)
            dout = torch.randn_like(kw["u"])
            line = [f"{shape[:3]} {str(dtype)[6:]}"]
            fns = {
                "ours fwd": lambda: bench_gpu.ours_fwd(kw),
                "ours f+b": lambda: bench_gpu.ours_fwd_bwd(kw, dout),
            }
            if mb is not None:
                fns["mamba fwd"] = lambda: bench_gpu.mamba_fwd(mb, kw)
                fns["mamba f+b"] = lambda: bench_gpu.mamba_fwd_bwd(mb, kw, dout)
            for fast in (False, True):
                triton_launch.FAST_EAGER = fast
                for name, fn in fns.items():
                    if name.startswith("mamba") and fast:
                        continue
                    enq, wall = per_call_us(fn)
                    tag = name + (" (launch cache)" if fast and name.startswith("ours") else "")
                    line.append(f"{tag} enqueue {enq:.0f} us, wall {wall:.0f} us")
            print(" | ".join(line), flush=True)
            if shape[0] == 1:
                for name in ("ours fwd", "ours f+b"):
                    pr = cProfile.Profile()
                    pr.enable()
                    for _ in range(20):
                        fns[name]()
                    pr.disable()
                    torch.cuda.synchronize()
                    s = io.StringIO()
                    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(14)
                    print(f"--- {name} {str(dtype)[6:]} (launch cache): 20 calls, by own time")
                    print("\n".join(s.getvalue().splitlines()[6:26]), flush=True)


if __name__ == "__main__":
    main()
