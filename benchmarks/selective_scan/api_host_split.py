"""Where the host time of a batch-1 eager training step through the public API goes: the
forward with inputs requiring grad, ``torch.autograd.grad``, our backward's own time inside it
(on the autograd engine's device thread), the same backward called directly, and a trivial
backward through the engine; beside them mamba-ssm's C++ ``fwd`` / ``bwd`` wrapped in a minimal
``autograd.Function`` (what its ``selective_scan_fn`` pays at the least) when it is importable.

    PYTHONPATH=src:/tmp/mbuild python benchmarks/selective_scan/api_host_split.py [B D L N] [--dtype bf16]

Microseconds per call to enqueue (best of 5 rounds of 50 calls, no synchronization inside) and
``do_bench`` medians (ms, the GPU work included)."""

from __future__ import annotations

import argparse
import time

import bench_gpu
import torch
import triton
from host_breakdown import us

import ssmscan
from ssmscan.ops.selective_scan import eager


class _Mamba(torch.autograd.Function):
    """mamba-ssm's kernel behind the autograd engine, with none of its Python wrapper's work."""

    @staticmethod
    def forward(ctx, mb, u, delta, A, B, C, D, z, delta_bias):
        B4, C4 = B.unsqueeze(1), C.unsqueeze(1)
        out, x, out_z = mb.fwd(u, delta, A, B4, C4, D, z, delta_bias, True)
        ctx.mb = mb
        ctx.save_for_backward(u, delta, A, B4, C4, D, z, delta_bias, x, out)
        return out_z

    @staticmethod
    def backward(ctx, dout):
        u, delta, A, B4, C4, D, z, delta_bias, x, out = ctx.saved_tensors
        du, ddelta, dA, dB, dC, dD, ddb, dz, *_ = ctx.mb.bwd(
            u, delta, A, B4, C4, D, z, delta_bias, dout, x, out, None, True, False
        )
        return None, du, ddelta, dA, dB.squeeze(1), dC.squeeze(1), dD, dz, ddb


def main():
    a, kw, dout = bench_gpu.host_case(argparse.ArgumentParser())
    grad_kw = {k: v.clone().requires_grad_() for k, v in kw.items()}
    leaves = list(grad_kw.values())
    inside = []
    real_backward = eager._Scan.backward

    def timed_backward(ctx, *grads):
        t0 = time.perf_counter()
        res = real_backward(ctx, *grads)
        inside.append(time.perf_counter() - t0)
        return res

    def fwd_grad():
        return ssmscan.selective_scan(**grad_kw, delta_softplus=True)

    def api_fb():
        return torch.autograd.grad(fwd_grad(), leaves, dout)

    outs = [fwd_grad() for _ in range(64)]  # graphs to call the backward of directly

    def bwd_direct():
        out = outs.pop() if outs else fwd_grad()
        with torch.no_grad():  # as the engine runs it (grad mode on: the create_graph path)
            return out.grad_fn.apply(dout, None)

    x = torch.randn(64, device="cuda", requires_grad=True)
    small = torch.randn(64, device="cuda")

    def trivial():
        return torch.autograd.grad(x * 2, [x], small)

    cases = {
        "api forward, inputs requiring grad": fwd_grad,
        "api forward + autograd.grad": api_fb,
        "our backward called directly": bwd_direct,
        "x * 2 through autograd.grad": trivial,
    }
    try:
        import selective_scan_cuda as mb
    except ImportError:
        mb = None
    if mb is not None:
        m_leaves = list(grad_kw.values())

        def mamba_fb():
            out = _Mamba.apply(mb, *m_leaves)
            return torch.autograd.grad(out, m_leaves, dout)

        cases["mamba fwd + bwd (C++ calls)"] = lambda: bench_gpu.mamba_fwd_bwd(mb, kw, dout)
        cases["mamba in an autograd.Function"] = mamba_fb
    print(f"{a.shape} {a.dtype}: host us to enqueue, do_bench ms")
    for name, fn in cases.items():
        if fn is bwd_direct:
            host = us(fn, n=10, rounds=5)  # each call uses one of the saved graphs
            ms = float("nan")
        else:
            host = us(fn, rounds=5)
            ms = triton.testing.do_bench(fn, return_mode="median", warmup=10, rep=60)
        print(f"  {name:40s} {host:7.1f} us  {ms:.4f} ms", flush=True)
    import threading
    from collections import Counter

    from ssmscan.ops.common import launch_plan

    replays: Counter = Counter()
    real_run = launch_plan.Plan.run

    def counted_run(self, args):
        replays[threading.current_thread().name] += 1
        return real_run(self, args)

    launch_plan.Plan.run = counted_run
    for _ in range(3):
        api_fb()
    launch_plan.Plan.run = real_run
    print(f"  plan replays in 3 training steps, by thread: {dict(replays)}")
    # the backward inside the engine, split: the planned launcher call and its plan's replay
    from ssmscan.ops.selective_scan import triton_bwd

    real_launcher = triton_bwd.backward
    in_launcher: list[float] = []
    in_run: dict[str, list[float]] = {}

    def timed_launcher(*args):
        t0 = time.perf_counter()
        res = real_launcher(*args)
        in_launcher.append(time.perf_counter() - t0)
        return res

    def timed_run(self, args):
        t0 = time.perf_counter()
        res = real_run(self, args)
        in_run.setdefault(threading.current_thread().name, []).append(time.perf_counter() - t0)
        return res

    def med(xs):
        return sorted(xs)[len(xs) // 2] * 1e6 if xs else float("nan")

    eager._Scan.backward = staticmethod(timed_backward)
    triton_bwd.backward = timed_launcher
    launch_plan.Plan.run = timed_run
    try:
        inside.clear()
        host = us(api_fb, rounds=5)
        print(
            f"  our backward's time inside autograd.grad (median) {med(inside):7.1f} us; whole call {host:.1f} us"
        )
        print(f"    of which triton_bwd.backward (planned)            {med(in_launcher):7.1f} us")
        for thread, xs in in_run.items():
            print(f"    plan replays on {thread:12s} (median)          {med(xs):7.1f} us")
    finally:
        eager._Scan.backward = staticmethod(real_backward)
        triton_bwd.backward = real_launcher
        launch_plan.Plan.run = real_run


if __name__ == "__main__":
    main()
