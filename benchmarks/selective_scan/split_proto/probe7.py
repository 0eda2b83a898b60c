# ruff: noqa: B023
"""Device probe: bwd_split (prototype backward in the forward's layout) vs the library's backward
op on the same inputs: max relative difference of every gradient, times (op / whole prototype
with the partial sums / prototype kernel alone), registers."""

import os
import sys

import torch
import triton

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import bench_gpu
import bwd_split

from ssmscan.ops.selective_scan import op as _op  # noqa: F401

CFGS = [
    dict(BLOCK_D=8, warps=1, TT=4, KEEP_A=False),
    dict(BLOCK_D=8, warps=1, TT=4, KEEP_A=False, PF=True),
    dict(BLOCK_D=8, warps=1, TT=4, KEEP_A=False, RS=True),
    dict(BLOCK_D=8, warps=1, TT=4, KEEP_A=False, PF=True, RS=True),
    dict(BLOCK_D=8, warps=1, TT=8, KEEP_A=True, PF=True),
    dict(BLOCK_D=8, warps=1, TT=8, KEEP_A=True, PF=True, RS=True),
]


def t(fn):
    return triton.testing.do_bench(fn, warmup=10, rep=100, return_mode="median")


def main():
    shapes = [(8, 4096, 2048, 16), (16, 1536, 1024, 16)]
    for shape in shapes:
        for dtn, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
            kw = bench_gpu.make(*shape, dtype)
            args = [kw[k] for k in ("u", "delta", "A", "B", "C", "D", "z", "delta_bias")]
            ops = torch.ops.ssmscan
            out, _last, ckpt = ops.selective_scan_fwd(*args, None, True)
            dout = torch.randn_like(out)
            ref = ops.selective_scan_bwd(dout, None, *args, None, ckpt, True)
            ref = [*ref[:5], *ref[5][:3]]
            line = [
                f"op {t(lambda: ops.selective_scan_bwd(dout, None, *args, None, ckpt, True)):.3f}"
            ]
            for cfg in CFGS:
                got = None
                try:
                    got = bwd_split.run(dout, *args, ckpt, **cfg)
                    torch.cuda.synchronize()
                    worst = max(
                        ((a.double() - b.double()).abs().max() / b.double().abs().max()).item()
                        for a, b in zip(got, ref)
                    )
                    whole = t(lambda: bwd_split.run(dout, *args, ckpt, **cfg))
                    kern = t(lambda: bwd_split.run(dout, *args, ckpt, reduce=False, **cfg))
                    tag = "TT{TT}{pf}{rs}".format(
                        TT=cfg["TT"],
                        pf="+PF" if cfg.get("PF") else "",
                        rs="+RS" if cfg.get("RS") else "",
                    )
                    line.append(f"{tag} {whole:.3f} k{kern:.3f} e{worst:.1e}")
                except Exception as e:
                    line.append(f"{cfg} FAILED {type(e).__name__}: {str(e)[:100]}")
                del got
            print(shape[:3], dtn, " | ".join(line), flush=True)


if __name__ == "__main__":
    main()
