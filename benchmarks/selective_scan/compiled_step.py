"""A batch-1 training step three ways, beside mamba-ssm's kernel: the public API in eager
(autograd), the same function under ``torch.compile(mode="reduce-overhead")`` (forward and
backward replayed as CUDA graphs: no host launch overhead), and mamba-ssm's C++ ``fwd`` / ``bwd``
behind a minimal ``autograd.Function`` when importable. Each step is the forward and
``torch.autograd.grad`` for every input; ``do_bench`` medians, ms.

    PYTHONPATH=src:/tmp/mbuild python benchmarks/selective_scan/compiled_step.py [B D L N] [--dtype bf16]
"""

from __future__ import annotations

import argparse
import time

import bench_gpu
import torch
import triton
from api_host_split import _Mamba

import ssmscan


def fwd(u, delta, A, B, C, D, z, delta_bias):
    """The public API's forward in the real configuration (softplus on)."""
    return ssmscan.selective_scan(u, delta, A, B, C, D, z, delta_bias, True)


def training_case():
    """The command line's case (``bench_gpu.host_case``): (args, its eight inputs as leaves that
    require grad, dout)."""
    a, kw, dout = bench_gpu.host_case(argparse.ArgumentParser())
    names = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias")
    return a, [kw[k].clone().requires_grad_() for k in names], dout


def main():
    a, leaves, dout = training_case()
    t0 = time.perf_counter()
    compiled = torch.compile(fwd, mode="reduce-overhead", fullgraph=True)

    def compiled_step():
        torch.compiler.cudagraph_mark_step_begin()
        return torch.autograd.grad(compiled(*leaves), leaves, dout)

    ref = torch.autograd.grad(fwd(*leaves), leaves, dout)
    for _ in range(3):
        got = compiled_step()
    torch.cuda.synchronize()
    err = max(bench_gpu.rel(g, r) for g, r in zip(got, ref))
    print(f"{a.shape} {a.dtype}: compiled in {time.perf_counter() - t0:.1f} s; gradients vs "
          f"eager: max rel error {err:.1e}")  # fmt: skip
    cases = {
        "api eager": lambda: torch.autograd.grad(fwd(*leaves), leaves, dout),
        "api, torch.compile reduce-overhead": compiled_step,
    }
    try:
        import selective_scan_cuda as mb
    except ImportError:
        mb = None
    if mb is not None:
        cases["mamba in an autograd.Function"] = lambda: torch.autograd.grad(
            _Mamba.apply(mb, *leaves), leaves, dout
        )
    res = {
        name: triton.testing.do_bench(fn, return_mode="median", warmup=10, rep=60)
        for name, fn in cases.items()
    }
    base = res.get("mamba in an autograd.Function")
    for name, ms in res.items():
        ratio = f"  ratio {ms / base:.2f}" if base else ""
        print(f"  {name:40s} {ms:.4f} ms{ratio}", flush=True)


if __name__ == "__main__":
    main()
