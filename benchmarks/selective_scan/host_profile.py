"""Where an eager call's host time goes: cProfile over repeated calls of our ops (through the
dispatcher, as the benchmark calls them) at one shape, the top functions by own time and by
cumulative time; with ``--api`` the public API's forward with inputs requiring grad and its
backward (``grad_fn.apply`` of graphs made beforehand: on this thread, where cProfile sees it;
the autograd engine runs it on its own thread) instead.

    PYTHONPATH=src python benchmarks/selective_scan/host_profile.py [B D L N] [--dtype bf16] [--api]
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
    ap.add_argument("--api", action="store_true", help="the public API's forward and backward")
    a = ap.parse_args()
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[a.dtype]
    kw = bench_gpu.make(*a.shape, dtype)
    dout = torch.randn_like(kw["u"])
    cases = [
        ("fwd", lambda: bench_gpu.ours_fwd(kw)),
        ("f+b", lambda: bench_gpu.ours_fwd_bwd(kw, dout)),
    ]
    if a.api:
        import ssmscan

        grad_kw = {k: v.clone().requires_grad_() for k, v in kw.items()}

        def api_fwd():
            return ssmscan.selective_scan(**grad_kw, delta_softplus=True)

        graphs = []

        def api_bwd():
            with torch.no_grad():  # as the engine runs it (grad mode on: the create_graph path)
                return graphs.pop().grad_fn.apply(dout, None)

        def make_graphs():
            graphs[:] = [api_fwd() for _ in range(a.calls + 10)]

        cases = [("api-fwd", api_fwd), ("api-bwd (grad_fn.apply)", api_bwd)]
    for name, fn in cases:
        if fn is cases[-1][1] and a.api:
            make_graphs()
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
