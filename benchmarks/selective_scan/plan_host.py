"""Host time of eager calls with and without recorded launch plans (Note [eager launch plans]),
and what the plans replay.

    PYTHONPATH=src python benchmarks/selective_scan/plan_host.py [B D L N] [--dtype bf16]

Microseconds per call to enqueue (best of 5 rounds of 50 calls, no synchronization inside), and
the time per call when the calls are timed with the GPU work included (``do_bench`` median, ms):
the second is what the benchmark tables show; it equals the host time where that is longer."""

from __future__ import annotations

import argparse

import bench_gpu
import torch
import triton
from host_breakdown import us

import ssmscan
from ssmscan.ops.common import launch_plan


def describe(fn) -> list[str]:
    lines = []
    for key, plan in fn.plans.items():
        if not isinstance(plan, launch_plan.Plan):
            lines.append(f"  rejected: {fn.rejected.get(key)}")
            continue
        ops = [str(s[1]).replace("aten.", "") for s in plan.steps if s[0] == "op"]
        lines.append(
            f"  {plan.n_launches} launches, {plan.n_ops} ops ({', '.join(ops)}), arena "
            f"{plan.arena_bytes} bytes"
        )
    return lines


def main():
    from ssmscan.ops.selective_scan import triton_bwd, triton_fwd

    a, kw, dout = bench_gpu.host_case(argparse.ArgumentParser())
    grad_kw = {k: v.clone().requires_grad_() for k, v in kw.items()}
    leaves = list(grad_kw.values())

    def api_fb():
        out = ssmscan.selective_scan(**grad_kw, delta_softplus=True)
        return torch.autograd.grad(out, leaves, dout)

    def api_fwd():
        with torch.no_grad():
            return ssmscan.selective_scan(**kw, delta_softplus=True)

    cases = {
        "op fwd (torch.ops)": lambda: bench_gpu.ours_fwd(kw),
        "op fwd+bwd (torch.ops)": lambda: bench_gpu.ours_fwd_bwd(kw, dout),
        "api fwd no_grad": api_fwd,
        "api fwd+bwd (autograd.grad)": api_fb,
    }
    rows = {}
    for name, fn in cases.items():
        for on in (False, True, False, True):  # interleaved: the host drifts
            launch_plan.ENABLED = on
            host = us(fn, rounds=5)
            ms = triton.testing.do_bench(fn, return_mode="median", warmup=10, rep=60)
            prev = rows.get((name, on))
            rows[(name, on)] = (
                (min(host, prev[0]), min(ms, prev[1])) if prev is not None else (host, ms)
            )
    launch_plan.ENABLED = True
    print(f"{a.shape} {a.dtype}: host us to enqueue / do_bench ms, plans off -> on")
    for name in cases:
        (h0, m0), (h1, m1) = rows[(name, False)], rows[(name, True)]
        print(f"  {name:32s} {h0:7.1f} -> {h1:7.1f} us   {m0:.4f} -> {m1:.4f} ms")
    print("forward plans:", *describe(triton_fwd.forward), sep="\n")
    print("backward plans:", *describe(triton_bwd.backward), sep="\n")


if __name__ == "__main__":
    main()
