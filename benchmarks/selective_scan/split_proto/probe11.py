# ruff: noqa: B023
"""Next-session probe (not run yet): the library's split backward (BWD_VARIANT "split") at 253
registers holds 8 warps per multiprocessor; ``maxnreg`` trades spills for warps (offline sm_90:
128 -> 576 bytes of spills, 168 -> 312, 200 -> 128). Times the backward op with tile_rs and
with split at several maxnreg, gradients compared with tile_rs's.

    cd benchmarks/selective_scan/split_proto && PYTHONPATH=$PWD/../../../src python probe11.py
"""

import os
import sys

import torch
import triton

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import bench_gpu

from ssmscan.ops.selective_scan import op as _op  # noqa: F401
from ssmscan.ops.selective_scan import triton_bwd, triton_bwd_split

MAXNREG = [None, 200, 168, 128]
real_launcher = triton_bwd.launcher
state = {"maxnreg": None}


def patched_launcher(kernel):
    inner = real_launcher(kernel)
    if kernel is not triton_bwd_split._selective_scan_bwd_split_kernel:
        return inner

    class _L:
        def __getitem__(self, grid):
            def call(*a, **k):
                if state["maxnreg"] is not None:
                    k["maxnreg"] = state["maxnreg"]
                return inner[grid](*a, **k)

            return call

    return _L()


triton_bwd.launcher = patched_launcher


def t(fn):
    return triton.testing.do_bench(fn, warmup=10, rep=100, return_mode="median")


def main():
    for shape in [(8, 4096, 2048, 16), (16, 1536, 1024, 16)]:
        for dtn, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
            kw = bench_gpu.make(*shape, dtype)
            args = [kw[k] for k in ("u", "delta", "A", "B", "C", "D", "z", "delta_bias")]
            ops = torch.ops.ssmscan
            out, _last, ckpt = ops.selective_scan_fwd(*args, None, True)
            dout = torch.randn_like(out)

            def bwd():
                return ops.selective_scan_bwd(dout, None, *args, None, ckpt, True)

            triton_bwd.BWD_VARIANT = "tile_rs"
            ref = bwd()
            ref = [*ref[:5], *ref[5]]
            line = [f"tile_rs {t(bwd):.3f}"]
            triton_bwd.BWD_VARIANT = "split"
            for mr in MAXNREG:
                state["maxnreg"] = mr
                got = bwd()
                got = [*got[:5], *got[5]]
                worst = max(
                    ((a.double() - b.double()).abs().max() / b.double().abs().max()).item()
                    for a, b in zip(got, ref)
                )
                line.append(f"split/{mr} {t(bwd):.3f} e{worst:.1e}")
            triton_bwd.BWD_VARIANT = "tile_rs"
            print(shape[:3], dtn, " | ".join(line), flush=True)


if __name__ == "__main__":
    main()
