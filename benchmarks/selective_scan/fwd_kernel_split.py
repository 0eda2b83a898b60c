"""GPU time of each kernel of one forward call (torch.profiler, CUDA activities): where the
split forward's time goes between B / C preparation, the local pass and the real pass.

    PYTHONPATH=src python benchmarks/selective_scan/fwd_kernel_split.py \\
        [--shapes 1x1536x4096x16] [--dtypes bf16,fp32] [--variants "base;FOLD_SKIP=1"] [--calls 20]

Variants as ``fwd_knob_sweep.py`` takes them; each kernel's mean over ``--calls`` calls is printed
(us), in launch order (the lane forward's local pass, then its real pass). With ``--graph`` the
calls are replays of a CUDA graph of the forward, each after the 256 MB L2 flush that
``triton.testing.do_bench`` runs before each timed call (the benchmarks' conditions: inputs cold
in L2, no host gaps between the kernels), and the span from the first kernel's start to the last
one's end is printed too."""

from __future__ import annotations

import argparse

import bench_gpu
import fwd_knob_sweep
import torch

FLUSH = None  # the L2 flush buffer (--graph)


def graphed(kw):
    """A replay of a CUDA graph of one forward call (``bench_gpu.graph_of``); makes the flush
    buffer on first use."""
    global FLUSH
    if FLUSH is None:
        FLUSH = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
    return bench_gpu.graph_of(lambda: bench_gpu.ours_fwd(kw)).replay


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="1x1536x4096x16")
    ap.add_argument("--dtypes", default="bf16,fp32")
    ap.add_argument("--variants", default="base")
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--graph", action="store_true", help="replay a CUDA graph after an L2 flush")
    a = ap.parse_args()
    for sh in a.shapes.split(","):
        batch, dim, L, N = (int(x) for x in sh.split("x"))
        for dn in a.dtypes.split(","):
            kw = bench_gpu.make(batch, dim, L, N, fwd_knob_sweep.DTYPES[dn])
            for v in [x.strip() for x in a.variants.split(";") if x.strip()]:
                with fwd_knob_sweep.applied(v):
                    call = graphed(kw) if a.graph else lambda kw=kw: bench_gpu.ours_fwd(kw)
                    for _ in range(3):
                        call()
                    torch.cuda.synchronize()
                    acts = [torch.profiler.ProfilerActivity.CUDA]
                    with torch.profiler.profile(activities=acts) as prof:
                        for _ in range(a.calls):
                            if a.graph:
                                FLUSH.zero_()
                            call()
                        torch.cuda.synchronize()
                evs = [
                    e
                    for e in prof.events()
                    if e.device_type == torch.autograd.DeviceType.CUDA
                    and not (a.graph and "FillFunctor" in e.name)  # the flush
                    and "Memcpy" not in e.name
                    and "Memset" not in e.name
                ]
                evs.sort(key=lambda e: e.time_range.start)
                per_call = len(evs) // a.calls
                tot = [0.0] * per_call  # launch i of a call: the local and real pass apart
                names = [""] * per_call
                for i, e in enumerate(evs[: per_call * a.calls]):
                    tot[i % per_call] += e.device_time if hasattr(e, "device_time") else e.cuda_time
                    names[i % per_call] = e.name
                print(f"{sh} {dn} {v}:", flush=True)
                for i in range(per_call):
                    print(f"   {tot[i] / a.calls:9.2f} us  [{i}] {names[i][:100]}", flush=True)
                print(f"   {sum(tot) / a.calls:9.2f} us total", flush=True)
                if a.graph:
                    spans = [
                        evs[c * per_call + per_call - 1].time_range.end
                        - evs[c * per_call].time_range.start
                        for c in range(a.calls)
                    ]
                    print(f"   {sum(spans) / a.calls:9.2f} us first start to last end", flush=True)


if __name__ == "__main__":
    main()
