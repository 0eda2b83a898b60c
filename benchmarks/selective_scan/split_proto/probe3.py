# ruff: noqa: B023  (device probes: lambdas timed at once)
"""Same process, alternating: prototype TT8 vs the library forward kernel launched with the same
buffers (no prep), to find where the library kernel loses time."""

import os
import sys

import torch
import triton

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from ssmscan.ops.selective_scan import op as _op  # noqa
from ssmscan.ops.selective_scan import triton_fwd
import bench_gpu
from probe_split import proto, prep_of, t

for shape in [(8, 4096, 2048, 16), (16, 1536, 1024, 16)]:
    for dtn, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        kw = bench_gpu.make(*shape, dtype)
        batch, dim, L, N = shape
        A2, Bt, Ct = prep_of(kw)
        NCK = L // 256 + 1
        out = torch.empty_like(kw["u"])
        ck = torch.empty(batch, dim, NCK, 16, device="cuda")
        out2 = torch.empty_like(kw["u"])
        ck2 = torch.empty(batch, dim, NCK, 16, device="cuda")
        dummy = torch.empty(16, device="cuda")
        Bt4 = Bt[:, None]
        Ct4 = Ct[:, None]

        def lib(BD=32, W=4, TT=8):
            triton_fwd._selective_scan_fwd_kernel[(triton.cdiv(dim, BD), batch, 1)](
                kw["u"],
                kw["delta"],
                A2,
                Bt4,
                Ct4,
                kw["D"],
                kw["z"],
                kw["delta_bias"],
                dummy,
                out2,
                ck2,
                dummy,
                dummy,
                dim,
                L,
                N,
                1,
                NCK,
                NCK - 1,
                SOFTPLUS=True,
                NP=16,
                CK=256,
                BLOCK_D=BD,
                HAS_D=True,
                HAS_Z=True,
                HAS_BIAS=True,
                HAS_INIT=False,
                LOCAL=False,
                TT=TT,
                SPLIT=False,
                num_warps=W,
            )

        for rnd in range(1):
            tp = t(lambda: proto(kw, 8, 32, 4, out, ck, (A2, Bt, Ct)))
            tl_ = t(lib)
            print(
                f"{shape} {dtn} round {rnd}: proto {tp:.3f} lib-direct {tl_:.3f} diff {bench_gpu.rel(out2, out):.1e}",
                flush=True,
            )
        if 0:
            print(
                f"   lib TT16 {t(lambda: lib(TT=16)):.3f} lib B64w8 {t(lambda: lib(64, 8)):.3f} lib TT4 {t(lambda: lib(TT=4)):.3f}",
                flush=True,
            )
