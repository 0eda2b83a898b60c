# ruff: noqa: B023  (lambdas used within the iteration)
"""Host (CPU) time of one eager call of our ops vs mamba-ssm's, and where ours goes.

    PYTHONPATH=src:/tmp/mbuild python benchmarks/selective_scan/host_overhead.py

Per shape / dtype, microseconds per call to *enqueue* 30 calls (no synchronization inside; the GPU
work of 30 calls is queued; the best of 3 rounds), for: the ops through the dispatcher
(``torch.ops.ssmscan``, what the benchmark times) with the eager launch cache on and off (Note
[eager launch cache]); the launchers called directly (no custom-op dispatch) with the cache on and
off; the launchers with every Triton launch stubbed out (the torch ops and Python around the
kernels); and mamba-ssm's C++ calls. The differences place the host time."""

from __future__ import annotations

import time

import bench_gpu
import torch


def per_call_us(fn, n=30, rounds=3) -> tuple[float, float]:
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    best = (float("inf"), float("inf"))
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        best = min(best, ((t1 - t0) / n * 1e6, (t2 - t0) / n * 1e6))
    return best


def main():
    from torch._library.triton import set_wrap_triton_enabled

    from ssmscan.ops.common import triton_launch
    from ssmscan.ops.selective_scan import shapes, triton_bwd, triton_fwd

    try:
        import selective_scan_cuda as mb
    except ImportError:
        mb = None
    real_getitem = triton_launch._Launcher.__getitem__

    def stub(self, grid):
        return lambda *a, **k: None

    for shape in [(1, 1536, 4096, 16), (8, 4096, 2048, 16)]:
        for dtype in (torch.float32, torch.bfloat16):
            kw = bench_gpu.make(*shape, dtype)
            dout = torch.randn_like(kw["u"])
            args = [kw[k] for k in ("u", "delta", "A", "B", "C", "D", "z", "delta_bias")]
            outs = shapes.empty_forward_outputs(kw["u"], kw["A"])
            ckpt = bench_gpu.ours_fwd(kw)[2]
            grads = shapes.empty_backward_outputs(*args, None)

            def launch_fwd():
                with set_wrap_triton_enabled(False):
                    triton_fwd.launch(*args, None, True, *outs)

            def launch_bwd():
                with set_wrap_triton_enabled(False):
                    triton_bwd.launch(dout, None, *args, None, ckpt, True, *grads[:5], grads[5])

            fns = {
                "op fwd": lambda: bench_gpu.ours_fwd(kw),
                "op f+b": lambda: bench_gpu.ours_fwd_bwd(kw, dout),
                "launch fwd": launch_fwd,
                "launch bwd": launch_bwd,
            }
            res = []
            for fast in (False, True):
                triton_launch.FAST_EAGER = fast
                for name, fn in fns.items():
                    res.append(f"{name}{' cache' if fast else ''} {per_call_us(fn)[0]:.0f}")
            triton_launch._Launcher.__getitem__ = stub
            try:
                for name in ("launch fwd", "launch bwd"):
                    res.append(f"{name} no kernels {per_call_us(fns[name])[0]:.0f}")
            finally:
                triton_launch._Launcher.__getitem__ = real_getitem
            triton_launch.FAST_EAGER = True
            if mb is not None:
                res.append(f"mamba fwd {per_call_us(lambda: bench_gpu.mamba_fwd(mb, kw))[0]:.0f}")
                f_b = lambda: bench_gpu.mamba_fwd_bwd(mb, kw, dout)  # noqa: E731
                res.append(f"mamba f+b {per_call_us(f_b)[0]:.0f}")
            print(f"{shape[:3]} {str(dtype)[6:]} enqueue us:", " | ".join(res), flush=True)


if __name__ == "__main__":
    main()
