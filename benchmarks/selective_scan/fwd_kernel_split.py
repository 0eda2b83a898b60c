"""GPU time of each kernel of one forward call (torch.profiler, CUDA activities): where the
split forward's time goes between B / C preparation, the local pass and the real pass.

    PYTHONPATH=src python benchmarks/selective_scan/fwd_kernel_split.py \\
        [--shapes 1x1536x4096x16] [--dtypes bf16,fp32] [--variants "base;FOLD_SKIP=1"] [--calls 20]

Variants as ``fwd_knob_sweep.py`` takes them; each kernel's mean over ``--calls`` calls is printed
(us), in launch order (the lane forward's local pass, then its real pass)."""

from __future__ import annotations

import argparse
import collections

import bench_gpu
import fwd_knob_sweep
import torch

from ssmscan.ops.selective_scan import triton_fwd


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="1x1536x4096x16")
    ap.add_argument("--dtypes", default="bf16,fp32")
    ap.add_argument("--variants", default="base")
    ap.add_argument("--calls", type=int, default=20)
    a = ap.parse_args()
    dtypes = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp16": torch.float16}
    base_opts = dict(triton_fwd.LANE_OPTIONS)
    for sh in a.shapes.split(","):
        batch, dim, L, N = (int(x) for x in sh.split("x"))
        for dn in a.dtypes.split(","):
            kw = bench_gpu.make(batch, dim, L, N, dtypes[dn])
            for v in [x.strip() for x in a.variants.split(";") if x.strip()]:
                opts, mod = fwd_knob_sweep.parse(v)
                saved = {
                    k: getattr(fwd_knob_sweep.MODULES[k.split(".")[0]], k.split(".")[1])
                    for k in mod
                }
                try:
                    triton_fwd.LANE_OPTIONS = {**base_opts, **opts}
                    for k, x in mod.items():
                        setattr(fwd_knob_sweep.MODULES[k.split(".")[0]], k.split(".")[1], x)
                    for _ in range(3):
                        bench_gpu.ours_fwd(kw)
                    torch.cuda.synchronize()
                    acts = [torch.profiler.ProfilerActivity.CUDA]
                    with torch.profiler.profile(activities=acts) as prof:
                        for _ in range(a.calls):
                            bench_gpu.ours_fwd(kw)
                        torch.cuda.synchronize()
                    tot: dict[str, float] = collections.defaultdict(float)
                    evs = [
                        e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
                    ]
                    evs.sort(key=lambda e: e.time_range.start)
                    per_call = len(evs) // a.calls
                    for i, e in enumerate(evs[: per_call * a.calls]):
                        key = f"[{i % per_call}] {e.name}"  # launch i of a call: the local / real pass apart
                        tot[key] += e.device_time if hasattr(e, "device_time") else e.cuda_time
                    print(f"{sh} {dn} {v}:", flush=True)
                    for k in sorted(tot, key=lambda k: int(k[1 : k.index("]")])):
                        print(f"   {tot[k] / a.calls:9.2f} us  {k[:100]}", flush=True)
                    print(f"   {sum(tot.values()) / a.calls:9.2f} us total", flush=True)
                finally:
                    triton_fwd.LANE_OPTIONS = dict(base_opts)
                    for k, x in saved.items():
                        setattr(fwd_knob_sweep.MODULES[k.split(".")[0]], k.split(".")[1], x)


if __name__ == "__main__":
    main()
