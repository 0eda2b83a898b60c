"""Where the SSD scan's GPU time goes, kernel by kernel: ``torch.profiler`` over forward+backward
steps of ssmscan's Triton kernels (the planner's plan and, with ``--plans``, variants of it) and
of mamba-ssm's ``mamba_chunk_scan_combined`` on the same inputs, in one process.

Mamba-2's layer (z, D per head, dt_bias, softplus: ``benchmarks/ssd_scan/bench_gpu.py``'s
``full`` problem and inputs). For each shape and variant it prints the GPU time of one step (the
sum of the kernels' device times, averaged over ``--iters`` steps after three warm-up steps) and
the kernels by name, largest first. Correctness is not checked here: ``bench_gpu.py`` gates
every variant against float64 before it times it.

    python tools/profile_ssd.py [--shapes 8,2048,80,64,1,128 ...] [--dtype bf16]
        [--plans NAME=field:value,... ...] [--mamba-src /tmp/mb/mamba_ssm-2.3.2.post1]
        [--iters 10] [--top 14]

Shapes are (batch, L, nheads, headdim, ngroups, dstate); plan variants are ``SSDPlan`` fields
as ``bench_gpu.py --plans`` takes them. mamba-ssm comes from its unpacked sdist (no build: its
SSD kernels are Triton); absent, it is skipped with the reason. Run it on a GPU machine
(``PYTHONPATH=src`` from a checkout; ``bash benchmarks/device.sh ssdprofile``).
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "ssd_scan"))
import bench_gpu  # the benchmark's inputs, plan parsing and anchors

DEFAULT_SHAPES = ["8,2048,80,64,1,128", "16,2048,24,64,1,128"]


def kernel_times(fn, kw: dict, iters: int) -> dict[str, float]:
    """Milliseconds of GPU time a forward+backward step, by kernel name."""
    leaves = bench_gpu._leaves(kw)
    dout = torch.randn_like(kw["x"])

    def step() -> None:
        for t in leaves.values():  # no accumulation into .grad (an add kernel per input)
            if isinstance(t, torch.Tensor) and t.requires_grad:
                t.grad = None
        out, final = fn(leaves, True)
        outs, grads = [out], [dout]
        if final is not None:
            outs.append(final)
            grads.append(torch.zeros_like(final))
        torch.autograd.backward(outs, grads)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    activities = [torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(iters):
            step()
        torch.cuda.synchronize()
    times: dict[str, float] = collections.defaultdict(float)
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            times[event.name] += event.time_range.elapsed_us() / 1e3 / iters
    return dict(times)


def show(name: str, times: dict[str, float], top: int) -> None:
    print(f"== {name}: {sum(times.values()):.3f} ms of GPU time a step")
    for kernel, ms in sorted(times.items(), key=lambda kv: -kv[1])[:top]:
        print(f"   {ms:8.3f}  {kernel[:90]}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", nargs="*", default=DEFAULT_SHAPES)
    ap.add_argument("--dtype", default="bf16", choices=list(bench_gpu.DTYPES))
    ap.add_argument("--plans", nargs="*", default=[], metavar="NAME=field:value[,...]")
    ap.add_argument("--mamba-src", default="/tmp/mb/mamba_ssm-2.3.2.post1")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--top", type=int, default=14)
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("profile_ssd.py needs a CUDA GPU (the Triton kernels' device times)")
    variants = {"ssmscan (planned)": bench_gpu.ours_planned({})}
    for spec in a.plans:
        name, changes = bench_gpu.parse_plan_changes(spec)
        variants[f"ssmscan[{name}]"] = bench_gpu.ours_planned(changes)
    mamba, why = bench_gpu.mamba_fn(a.mamba_src)
    if mamba is None:
        print(f"mamba-ssm skipped: {why}")
    else:
        variants["mamba-ssm"] = mamba
    dtype = bench_gpu.DTYPES[a.dtype]
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {a.dtype}")
    for spec in a.shapes:
        shape = tuple(int(v) for v in spec.split(","))
        if len(shape) != 6:
            raise SystemExit(f"--shapes {spec!r}: expected batch,L,nheads,headdim,ngroups,dstate")
        kw = bench_gpu.make(*shape, dtype, "cuda", True)
        print(f"### {shape}")
        for name, fn in variants.items():
            show(name, kernel_times(fn, kw, a.iters), a.top)


if __name__ == "__main__":
    main()
