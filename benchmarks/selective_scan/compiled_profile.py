"""Why a compiled batch-1 training step can be slower than the eager one (``compiled_step.py``:
0.81 ms under ``torch.compile(mode="reduce-overhead")`` against 0.68 eager, H200, 2026-12-02).

For the public API's forward + ``torch.autograd.grad`` on leaves, under ``mode="default"``
(Inductor, no CUDA graphs) and ``mode="reduce-overhead"`` (CUDA graphs): ``do_bench`` medians of
the step (ms), the host time to enqueue one step (us, best of 5 rounds of 20, no synchronization
inside), and a ``torch.profiler`` table of the device time per step by kernel / op over 10 steps.

    PYTHONPATH=src python benchmarks/selective_scan/compiled_profile.py [B D L N] [--dtype bf16]
"""

from __future__ import annotations

import time

import torch
import triton
from compiled_step import fwd, training_case


def enqueue_us(step, rounds: int = 5, n: int = 20) -> float:
    best = float("inf")
    for _ in range(rounds):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            step()
        best = min(best, (time.perf_counter() - t0) / n)
        torch.cuda.synchronize()
    return best * 1e6


def main():
    _, leaves, dout = training_case()
    steps = {"eager": lambda: torch.autograd.grad(fwd(*leaves), leaves, dout)}
    for mode in ("default", "reduce-overhead"):
        torch._dynamo.reset()
        compiled = torch.compile(fwd, mode=mode, fullgraph=True)

        def step(compiled=compiled, mode=mode):
            if mode == "reduce-overhead":
                torch.compiler.cudagraph_mark_step_begin()
            return torch.autograd.grad(compiled(*leaves), leaves, dout)

        t0 = time.perf_counter()
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        print(f"{mode}: compiled and warmed up in {time.perf_counter() - t0:.1f} s", flush=True)
        steps[mode] = step
        ms = triton.testing.do_bench(step, return_mode="median", warmup=10, rep=60)
        print(f"  step {ms:.4f} ms, host enqueue {enqueue_us(step):.0f} us", flush=True)
        with torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        ) as prof:
            for _ in range(10):
                step()
            torch.cuda.synchronize()
        print(
            prof.key_averages().table(sort_by="self_device_time_total", row_limit=22, max_name_column_width=60),
            flush=True,
        )  # fmt: skip
    ms = triton.testing.do_bench(steps["eager"], return_mode="median", warmup=10, rep=60)
    print(f"eager: step {ms:.4f} ms, host enqueue {enqueue_us(steps['eager']):.0f} us")


if __name__ == "__main__":
    main()
