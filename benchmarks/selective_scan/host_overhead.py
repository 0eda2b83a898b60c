# ruff: noqa: B023  (lambdas used within the iteration)
"""Host (CPU) time of one eager call of our ops vs mamba-ssm's, and where ours goes.

    PYTHONPATH=src:/tmp/mbuild python benchmarks/selective_scan/host_overhead.py

Per shape / dtype, microseconds per call to *enqueue* 30 calls (no synchronization inside; the GPU
work of 30 calls is queued; the best of 3 rounds), for: the ops through the dispatcher
(``torch.ops.ssmscan``, what the benchmark times); the ops' bodies (``triton_fwd.forward``,
``triton_bwd.backward``: no custom-op dispatch) with recorded launch plans (the default), with the
eager launch cache only (``LaunchOptions(replay=False)``) and with neither (``cache=False``; Note
[eager launch plans], Note [eager launch cache]); the launchers called directly with the cache on
and off; the launchers with every Triton launch stubbed out (the torch ops and Python around the
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
    from ssmscan.ops.common.launch_options import DEFAULT, LaunchOptions
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

            def body_fwd(options):
                with set_wrap_triton_enabled(False):
                    triton_fwd.forward(*args, None, True, options=options)

            def body_bwd(options):
                with set_wrap_triton_enabled(False):
                    triton_bwd.backward(dout, None, *args, None, ckpt, True, options=options)

            def launch_fwd(options=DEFAULT):
                with set_wrap_triton_enabled(False):
                    triton_fwd.launch(*args, None, True, *outs, options=options)

            def launch_bwd(options=DEFAULT):
                with set_wrap_triton_enabled(False):
                    triton_bwd.launch(dout, None, *args, None, ckpt, True, *grads[:5], grads[5],
                                      options=options)  # fmt: skip

            res = [
                f"op fwd {per_call_us(lambda: bench_gpu.ours_fwd(kw))[0]:.0f}",
                f"op f+b {per_call_us(lambda: bench_gpu.ours_fwd_bwd(kw, dout))[0]:.0f}",
            ]
            settings = {
                "plans": DEFAULT,
                "cache": LaunchOptions(replay=False),
                "plain": LaunchOptions(cache=False),
            }
            for tag, options in settings.items():
                for name, fn in (("body fwd", body_fwd), ("body bwd", body_bwd)):
                    res.append(f"{name} {tag} {per_call_us(lambda: fn(options))[0]:.0f}")
            for tag in ("cache", "plain"):
                for name, fn in (("launch fwd", launch_fwd), ("launch bwd", launch_bwd)):
                    res.append(f"{name} {tag} {per_call_us(lambda: fn(settings[tag]))[0]:.0f}")
            triton_launch._Launcher.__getitem__ = stub
            try:
                for name, fn in (("launch fwd", launch_fwd), ("launch bwd", launch_bwd)):
                    res.append(f"{name} no kernels {per_call_us(fn)[0]:.0f}")
            finally:
                triton_launch._Launcher.__getitem__ = real_getitem
            if mb is not None:
                res.append(f"mamba fwd {per_call_us(lambda: bench_gpu.mamba_fwd(mb, kw))[0]:.0f}")
                f_b = lambda: bench_gpu.mamba_fwd_bwd(mb, kw, dout)  # noqa: E731
                res.append(f"mamba f+b {per_call_us(f_b)[0]:.0f}")
            print(f"{shape[:3]} {str(dtype)[6:]} enqueue us:", " | ".join(res), flush=True)


if __name__ == "__main__":
    main()
