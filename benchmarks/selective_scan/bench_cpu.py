"""CPU benchmark of selective_scan against the sequential PyTorch loop.

    python benchmarks/selective_scan/bench_cpu.py [--shapes 1,1536,1024,16 4,768,2048,16] [--reps 5]

Real Mamba configuration (z, D, delta_bias, softplus), fp32. The anchor is the per-timestep loop
that mamba-ssm's ``selective_scan_ref`` and transformers' slow path run: decays and inputs
materialized as (batch, dim, L, N), then one state update and one contraction per step, in
PyTorch ops. Every variant's output is first checked against the float64 reference on a slice of
channels; a failing variant is not timed. Times are medians; each variant's peak memory is
measured in a fresh subprocess (peak RSS of the call minus RSS with the inputs allocated).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

import ssmscan
from ssmscan.bench import (  # the sequential loop as reference implementations write it
    ARGS,
    loop_anchor,
)
from ssmscan.scan import affine_scan
from ssmscan.testing import make_selective_scan_inputs, rel_error, tolerance


def parallel_aten(u, delta, A, B, C, D, z, delta_bias, delta_softplus):
    """The vectorized-PyTorch alternative: materialized (batch, dim, N, L) decays and inputs,
    solved with ssmscan.scan's work-efficient (Blelloch) affine scan along L."""
    dt = delta + delta_bias[:, None]
    if delta_softplus:
        dt = F.softplus(dt)
    a = torch.exp(dt[:, :, None, :] * A[None, :, :, None])
    b = (dt * u)[:, :, None, :] * B[:, None, :, :]
    h = affine_scan(a, b, dim=-1, algorithm="blelloch")
    y = (h * C[:, None, :, :]).sum(2) + u * D[:, None]
    return y * F.silu(z)


def ours(u, delta, A, B, C, D, z, delta_bias, delta_softplus):
    return ssmscan.selective_scan(u, delta, A, B, C, D, z, delta_bias, delta_softplus)


VARIANTS = {"ssmscan": ours, "parallel-aten": parallel_aten, "loop": loop_anchor}


def _inputs(shape, requires_grad=False):
    batch, dim, L, N = shape
    kw = make_selective_scan_inputs(batch, dim, L, N, seed=0, requires_grad=requires_grad)
    return {k: kw[k] for k in ARGS}


def check(fn, shape, channels=8) -> float:
    """Relative error against the float64 reference on the first ``channels`` channels."""
    kw = _inputs(shape)
    out = fn(**kw)[:, :channels]
    sl = {
        k: (
            v[:, :channels]
            if k in ("u", "delta", "z")
            else v[:channels]
            if k in ("A", "D", "delta_bias")
            else v
        )
        for k, v in kw.items()
    }
    sl64 = {k: (v.double() if isinstance(v, torch.Tensor) else v) for k, v in sl.items()}
    return rel_error(out, ssmscan.selective_scan_reference(**sl64))


def time_variant(fn, shape, reps, backward) -> float:
    kw = _inputs(shape, requires_grad=backward)
    times = []
    for _ in range(reps + 1):
        t0 = time.perf_counter()
        out = fn(**kw)
        if backward:
            out.sum().backward()
        times.append(time.perf_counter() - t0)
        for v in kw.values():
            if isinstance(v, torch.Tensor):
                v.grad = None
    return statistics.median(times[1:]) * 1e3


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def peak_memory_child(variant: str, shape, backward: bool) -> None:
    """Peak resident memory of one call beyond what the inputs already hold: RSS is measured
    after the inputs exist and a small warm-up call has loaded every library, the kernel's peak
    (VmHWM) is reset through /proc/self/clear_refs, and read again after the call."""
    kw = _inputs(shape, requires_grad=backward)
    in_bytes = sum(v.numel() * v.element_size() for v in kw.values() if isinstance(v, torch.Tensor))
    io_bytes = in_bytes + kw["u"].numel() * kw["u"].element_size()  # the output
    if backward:
        io_bytes *= 2  # gradients of every input, the output cotangent
    small = _inputs((1, 4, 8, shape[3]), requires_grad=backward)
    warm = VARIANTS[variant](**small)
    if backward:
        warm.sum().backward()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    base = _status_kb("VmRSS") * 1024
    out = VARIANTS[variant](**kw)
    if backward:
        out.sum().backward()
    peak = _status_kb("VmHWM") * 1024
    # peak footprint of the call over inputs + outputs (+ gradients): 1.0 means no temporaries
    print(json.dumps({"ratio": (in_bytes + peak - base) / io_bytes}))


def peak_memory(variant: str, shape, backward: bool) -> dict:
    code = (
        "import sys; sys.path.insert(0, 'benchmarks/selective_scan'); import bench_cpu; "
        f"bench_cpu.peak_memory_child({variant!r}, {tuple(shape)!r}, {backward!r})"
    )
    # large blocks straight from mmap and back on free, so RSS follows live memory
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="131072")
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--shapes", nargs="+", default=["1,1536,1024,16", "4,768,2048,16"])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--loop-reps", type=int, default=2)
    args = p.parse_args()
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, "
        f"cpu capability {torch.backends.cpu.get_cpu_capability()}"
    )
    rows = []
    for spec in args.shapes:
        shape = tuple(int(x) for x in spec.split(","))
        for name, fn in VARIANTS.items():
            err = check(fn, shape)
            if not err <= tolerance(torch.float32):
                print(f"{name} {shape}: FAILS its check (rel err {err:.2e}); not timed")
                continue
            reps = args.loop_reps if name == "loop" else args.reps
            fwd = time_variant(fn, shape, reps, backward=False)
            fb = time_variant(fn, shape, reps, backward=True)
            mem_f, mem_b = peak_memory(name, shape, False), peak_memory(name, shape, True)
            rows.append((shape, name, err, fwd, fb, mem_f, mem_b))
            print(
                f"{name:8s} {shape}: err {err:.1e}  fwd {fwd:9.1f} ms  fwd+bwd {fb:9.1f} ms  "
                f"peak / (inputs+outputs): fwd {mem_f['ratio']:.2f}x  fwd+bwd {mem_b['ratio']:.2f}x",
                flush=True,
            )
    print(
        "\n| B,D,L,N | fwd ssmscan ms | fwd loop ms | speedup | fwd+bwd ssmscan ms | fwd+bwd loop ms | speedup | peak / (inputs+outputs), fwd; fwd+bwd |"
    )
    print("|---|---|---|---|---|---|---|---|")
    by = {(r[0], r[1]): r for r in rows}
    for shape in dict.fromkeys(r[0] for r in rows):
        o, lo = by.get((shape, "ssmscan")), by.get((shape, "loop"))
        if o and lo:
            print(
                f"| {','.join(map(str, shape))} | {o[3]:.1f} | {lo[3]:.0f} | {lo[3] / o[3]:.1f}x | {o[4]:.1f} | "
                f"{lo[4]:.0f} | {lo[4] / o[4]:.1f}x | {o[5]['ratio']:.2f}x, {o[6]['ratio']:.2f}x |"
            )


if __name__ == "__main__":
    main()
