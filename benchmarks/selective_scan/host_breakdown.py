# ruff: noqa: B023  (lambdas used within the iteration)
"""Host time of one eager call, piece by piece (no profiler: cProfile's per-call cost distorts
Python-heavy code): the op through the dispatcher, its body called directly, the public API,
the launchers, and each Triton launch of a forward / backward three ways (our cached
``_fast_launch``, the compiled launcher's ``run`` alone, Triton's ``kernel[grid](...)``).

    PYTHONPATH=src python benchmarks/selective_scan/host_breakdown.py [B D L N] [--dtype bf16]

Microseconds per call to enqueue (no synchronization inside; best of 3 rounds of 50 calls)."""

from __future__ import annotations

import argparse
import time

import bench_gpu
import torch

import ssmscan


def us(fn, n=50, rounds=3) -> float:
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n * 1e6)
        torch.cuda.synchronize()
    return best


def main():
    from torch._library.triton import set_wrap_triton_enabled
    from triton.runtime.driver import driver

    from ssmscan.ops.common import triton_launch
    from ssmscan.ops.selective_scan import op, shapes, triton_bwd, triton_fwd

    a, kw, dout = bench_gpu.host_case(argparse.ArgumentParser())
    args = [kw[k] for k in ("u", "delta", "A", "B", "C", "D", "z", "delta_bias")]
    outs = shapes.empty_forward_outputs(kw["u"], kw["A"])
    ckpt = bench_gpu.ours_fwd(kw)[2]
    grads = shapes.empty_backward_outputs(*args, None)
    fwd_body = op.selective_scan_fwd._init_fn
    res = {}

    def launch_fwd():
        with set_wrap_triton_enabled(False):
            triton_fwd.launch(*args, None, True, *outs)

    def launch_bwd():
        with set_wrap_triton_enabled(False):
            triton_bwd.launch(dout, None, *args, None, ckpt, True, *grads[:5], grads[5])

    grad_kw = {
        k: v.clone().requires_grad_(k in ("u", "delta", "A", "B", "C")) for k, v in kw.items()
    }

    def api_fb():
        out = ssmscan.selective_scan(**grad_kw, delta_softplus=True)
        out.backward(dout)

    res["op fwd (torch.ops)"] = us(lambda: bench_gpu.ours_fwd(kw))
    res["op body fwd (no dispatch)"] = us(lambda: fwd_body(*args, None, True))
    with torch.no_grad():
        res["api fwd no_grad"] = us(lambda: ssmscan.selective_scan(**kw, delta_softplus=True))
    res["api fwd requires_grad"] = us(
        lambda: ssmscan.selective_scan(**grad_kw, delta_softplus=True)
    )
    res["api fwd+backward()"] = us(api_fb)
    out_g = ssmscan.selective_scan(**grad_kw, delta_softplus=True)
    leaves = [v for v in grad_kw.values() if v.requires_grad]
    res["api bwd: grad_fn.apply (no engine)"] = us(lambda: out_g.grad_fn.apply(dout, None))
    res["api bwd: autograd.grad (engine)"] = us(
        lambda: torch.autograd.grad(out_g, leaves, dout, retain_graph=True)
    )
    x = torch.randn(8, device="cuda", requires_grad=True)
    y = x * 2.0
    res["engine: autograd.grad of x * 2 (cuda)"] = us(
        lambda: torch.autograd.grad(y, x, torch.ones_like(y), retain_graph=True)
    )
    res["op f+b (torch.ops)"] = us(lambda: bench_gpu.ours_fwd_bwd(kw, dout))
    res["launch fwd"] = us(launch_fwd)
    res["launch bwd"] = us(launch_bwd)
    res["torch.empty x1"] = us(lambda: torch.empty((1, 1536, 4096), device="cuda"))

    def ctx():
        with set_wrap_triton_enabled(False):
            pass

    res["set_wrap_triton_enabled ctx"] = us(ctx)

    # each launch of one forward / backward, three ways
    rec = []
    real = triton_launch._fast_launch

    def spy(jit, grid, a_, k_, check, like):
        rec.append((jit, grid, a_, k_, check, like))
        return real(jit, grid, a_, k_, check, like)

    triton_launch._fast_launch = spy
    try:
        launch_fwd()
        n_fwd = len(rec)
        launch_bwd()
    finally:
        triton_launch._fast_launch = real
    dev = driver.active.get_current_device()
    for i, (jit, grid, a_, k_, check, like) in enumerate(rec):
        name = f"{'fwd' if i < n_fwd else 'bwd'} {jit.fn.__name__} ({len(a_) + len(k_)} args)"
        res[f"{name}: _fast_launch"] = us(lambda: real(jit, grid, a_, k_, check, like))
        par = triton_launch._params(jit)
        compiled = next(iter(par.cache.values())) if len(par.cache) == 1 else None
        if compiled is not None:
            values = list(a_) + [
                k_[n] if n in k_ else par.defaults[n] for n in par.names[len(a_) :]
            ]
            g = (*grid, 1, 1)

            def run():
                stream = driver.active.get_current_stream(dev)
                compiled.run(g[0], g[1], g[2], stream, compiled.function,
                             compiled.packed_metadata, None, None, None, *values)  # fmt: skip

            res[f"{name}: compiled.run only"] = us(run)
        res[f"{name}: triton kernel[grid]"] = us(lambda: jit[grid](*a_, **k_))
    for k, v in res.items():
        print(f"{a.shape} {a.dtype} {k:60s} {v:8.1f} us", flush=True)


if __name__ == "__main__":
    main()
