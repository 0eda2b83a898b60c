# ruff: noqa: B023  (device probes: lambdas timed at once)
import os
import sys

import torch
import triton

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from ssmscan.ops.selective_scan import op as _op  # noqa
import bench_gpu
import fwd_split
from probe_split import proto, prep_of, t

for shape in [(8, 4096, 2048, 16), (16, 1536, 1024, 16)]:
    for dtn, dtype in (("fp32", torch.float32),):
        kw = bench_gpu.make(*shape, dtype)
        batch, dim, L, N = shape
        A2, Bt, Ct = prep_of(kw)
        NCK = L // 256 + 1
        out = torch.empty_like(kw["u"])
        ck = torch.empty(batch, dim, NCK, 16, device="cuda")
        ref = torch.empty_like(out)
        proto(kw, 8, 32, 4, ref, ck, (A2, Bt, Ct))

        def run(te, ini, grp):
            fwd_split.fwd_split_kernel[(triton.cdiv(dim, 32), batch, 1)](
                kw["u"],
                kw["delta"],
                A2,
                Bt,
                Ct,
                kw["D"],
                kw["z"],
                kw["delta_bias"],
                out,
                ck,
                dim,
                L,
                NCK,
                NCK - 1,
                1,
                F_TEND=te,
                F_INIT=ini,
                F_GRP=grp,
                NP=16,
                CK=256,
                BLOCK_D=32,
                TT=8,
                num_warps=4,
            )

        res = [f"proto {t(lambda: proto(kw, 8, 32, 4, ref, ck, (A2, Bt, Ct))):.3f}"]
        for flags in [(0, 0, 0), (1, 0, 0), (0, 1, 0), (0, 0, 1), (1, 1, 1)]:
            run(*flags)
            torch.cuda.synchronize()
            res.append(f"{flags}: {t(lambda: run(*flags)):.3f} ({bench_gpu.rel(out, ref):.0e})")
        print(shape, dtn, " | ".join(res), flush=True)
