"""Where the GPU time of ssmscan's selective scan goes, kernel by kernel.

``--breakdown``: ``torch.profiler`` over a few forward+backward calls per (shape, dtype, backward
variant); prints each kernel's device time per call (us) and its share, so that the partial sums,
the states kernel, the main kernel and the small torch ops are placed. ``--once``: a few calls of
one (shape, dtype) and nothing else, for running under Nsight Compute (``ncu``), e.g.

    PYTHONPATH=src python benchmarks/selective_scan/profile_gpu.py --breakdown
    ncu --clock-control none -k regex:_selective_scan -c 4 --section WarpStateStats \\
        python benchmarks/selective_scan/profile_gpu.py --once --shapes 8x4096x2048x16 --dtypes bf16
"""

from __future__ import annotations

import argparse
import collections

import bench_gpu
import torch
from torch.profiler import ProfilerActivity, profile

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def parse_shapes(s: str | None) -> list[tuple[int, ...]]:
    if not s:
        return bench_gpu.SHAPES
    return [tuple(int(v) for v in x.split("x")) for x in s.split(",")]


def breakdown(
    kw: dict, dout: torch.Tensor, calls: int = 5, fwd_only: bool = False
) -> tuple[float, list]:
    """(us per call on the GPU in all, [(kernel, us per call), ...] largest first), of forward+
    backward calls (of forward calls with ``fwd_only``)."""

    def call() -> None:
        if fwd_only:
            bench_gpu.ours_fwd(kw)
        else:
            bench_gpu.ours_fwd_bwd(kw, dout)

    for _ in range(3):
        call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
    per: dict[str, float] = collections.defaultdict(float)
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            per[ev.name[:70]] += ev.time_range.elapsed_us() / calls
    total = sum(per.values())
    return total, sorted(per.items(), key=lambda kv: -kv[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--shapes", default=None, help="e.g. 8x4096x2048x16,16x1536x1024x16")
    ap.add_argument("--dtypes", default="bf16,fp32")
    ap.add_argument(
        "--bwd-variants",
        default="split,lane",
        help="BWD_VARIANT values with options (bench_gpu.set_variant), e.g. lane-noprefetch-r184",
    )
    ap.add_argument("--breakdown", action="store_true")
    ap.add_argument("--fwd", action="store_true", help="--breakdown of forward calls only")
    ap.add_argument(
        "--once", action="store_true", help="3 forward+backward calls (forward with --fwd), for ncu"
    )
    ap.add_argument(
        "--time-lanes",
        type=int,
        default=None,
        metavar="BC_MODE",
        help="the time-lane forward (triton_fwd.FWD_TIME_LANES) with this TLANE_BC_MODE",
    )
    ap.add_argument(
        "--tlane-warps", type=int, default=1, help="triton_fwd.TLANE_WARPS (with --time-lanes)"
    )
    ap.add_argument(
        "--lane-options", default="", help="triton_fwd.LANE_OPTIONS, e.g. BC_JIT=1,PF_BC=2"
    )
    a = ap.parse_args()
    lane_options = (
        {k: int(v) for k, v in (o.split("=") for o in a.lane_options.split(","))}
        if a.lane_options
        else {}
    )
    if a.time_lanes is not None:
        from ssmscan.ops.selective_scan import triton_fwd

        triton_fwd.FWD_TIME_LANES, triton_fwd.TLANE_BC_MODE = True, a.time_lanes
        triton_fwd.TLANE_WARPS = a.tlane_warps
    for shape in parse_shapes(a.shapes):
        for dn in a.dtypes.split(","):
            kw = bench_gpu.make(*shape, DTYPES[dn])
            dout = torch.randn_like(kw["u"])
            for var in a.bwd_variants.split(",")[: 1 if a.fwd else None]:
                bench_gpu.set_variant(var)
                if lane_options:  # on top of the variant's (set_variant resets them)
                    from ssmscan.ops.selective_scan import triton_fwd

                    triton_fwd.LANE_OPTIONS = {**triton_fwd.LANE_OPTIONS, **lane_options}
                if a.once:
                    for _ in range(3):
                        if a.fwd:
                            bench_gpu.ours_fwd(kw)
                        else:
                            bench_gpu.ours_fwd_bwd(kw, dout)
                    torch.cuda.synchronize()
                    continue
                total, rows = breakdown(kw, dout, fwd_only=a.fwd)
                what = "fwd" if a.fwd else f"bwd={var}"
                print(f"\n{list(shape)} {dn} {what}: {total:.0f} us of kernels per call")
                for name, us in rows:
                    print(f"  {us:8.1f} us {100 * us / total:5.1f}%  {name}")


if __name__ == "__main__":
    main()
