# ruff: noqa: B023  (lambdas used within the iteration)
"""Register caps (Triton's ``maxnreg``) for the forward main kernel and the split backward, timed
on the GPU beside the library's defaults, with outputs checked against the default launch's.

The forward holds 124 registers (16 warps per multiprocessor; 4-warp programs): at (16, 1536,
1024, 16) its 3072 warps make 1.45 waves of 2112, so about a quarter of the machine idles in the
second wave; a cap of 80 would fit them in one. The split backward holds 253 (8 warps per
multiprocessor). Also times the backward's dB / dC partial sums (the launcher's ``torch.sum``)
alone, to place that part of the op's time.

    PYTHONPATH=src python benchmarks/selective_scan/tune_regs.py [--shapes 8x4096x2048x16,...]
"""

from __future__ import annotations

import argparse

import bench_gpu
import torch
import triton

from ssmscan.ops.selective_scan import triton_bwd, triton_bwd_split, triton_fwd

FWD_CAPS = [None, 96, 80, 72, 64]
BWD_CAPS = [None, 200, 168]
state: dict = {"fwd": None, "bwd": None}


def _capped(real, kernel, key):
    def make(k):
        inner = real(k)
        if k is not kernel:
            return inner

        class _L:
            def __getitem__(self, grid):
                def call(*a, **kw):
                    if state[key] is not None:
                        kw["maxnreg"] = state[key]
                    return inner[grid](*a, **kw)

                return call

        return _L()

    return make


triton_fwd.launcher = _capped(triton_fwd.launcher, triton_fwd._selective_scan_fwd_kernel, "fwd")
triton_bwd.launcher = _capped(
    triton_bwd.launcher, triton_bwd_split._selective_scan_bwd_split_kernel, "bwd"
)


def t(fn):
    return triton.testing.do_bench(fn, warmup=10, rep=80, return_mode="median")


def worst(got, ref):
    return max(bench_gpu.rel(a, b) for a, b in zip(got, ref))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default=None)
    a = ap.parse_args()
    shapes = (
        bench_gpu.SHAPES
        if a.shapes is None
        else [tuple(int(x) for x in s.split("x")) for s in a.shapes.split(",")]
    )
    ops = torch.ops.ssmscan
    for shape in shapes:
        for dtn, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
            kw = bench_gpu.make(*shape, dtype)
            args = [kw[k] for k in ("u", "delta", "A", "B", "C", "D", "z", "delta_bias")]
            state["fwd"] = None
            ref_f = ops.selective_scan_fwd(*args, None, True)
            line = []
            for cap in FWD_CAPS:
                state["fwd"] = cap
                got = ops.selective_scan_fwd(*args, None, True)
                ms = t(lambda: ops.selective_scan_fwd(*args, None, True))
                line.append(f"{cap}:{ms:.3f}" + ("" if worst(got, ref_f) < 1e-6 else " DIFF"))
            state["fwd"] = None
            print(shape[:3], dtn, "fwd", " ".join(line), flush=True)

            ckpt = ref_f[2]
            dout = torch.randn_like(ref_f[0])

            def bwd():
                r = ops.selective_scan_bwd(dout, None, *args, None, ckpt, True)
                return [*r[:5], *r[5]]

            triton_bwd.BWD_VARIANT = "tile_rs"
            ref_b = bwd()
            line = [f"tile_rs:{t(bwd):.3f}"]
            triton_bwd.BWD_VARIANT = "split"
            for cap in BWD_CAPS:
                state["bwd"] = cap
                e = worst(bwd(), ref_b)
                line.append(f"split/{cap}:{t(bwd):.3f} e{e:.1e}")
            state["bwd"] = None
            triton_bwd.BWD_VARIANT = "tile_rs"
            # the launcher's partial sums alone: (dim / 8, batch, L, 16) fp32, twice
            batch, dim, L, _N = shape
            part = torch.randn(dim // 8, batch, L, 16, device="cuda")
            red = lambda: part.reshape(1, dim // 8, batch, L, 16).sum(1)  # noqa: E731
            line.append(f"partial-sums:{2 * t(red):.3f}")
            print(shape[:3], dtn, "bwd", " ".join(line), flush=True)
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
