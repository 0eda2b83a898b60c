# ruff: noqa: B023, F841, RUF059  (device probes: lambdas timed at once)
"""Device probe: split-state forward prototype vs the library forward (same inputs, same process)."""

import json
import os
import sys

import torch
import triton

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from ssmscan.ops.selective_scan import op as _op  # noqa
import bench_gpu
import fwd_split

LOG2E = 1.4426950408889634
res = []


def t(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")


def proto(kw, TT, BD, W, out, ck, prep):
    u = kw["u"]
    batch, dim, L = u.shape
    N = kw["A"].shape[1]
    NCK = L // 256 + 1 if L % 256 == 0 else L // 256 + 2
    A2, Bt, Ct = prep
    fwd_split.fwd_split_kernel[(triton.cdiv(dim, BD), batch)](
        u,
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
        NCK - 1,  # SEG
        1,  # G
        NP=16,
        CK=256,
        BLOCK_D=BD,
        TT=TT,
        num_warps=W,
    )


def prep_of(kw):
    A2 = (kw["A"] * LOG2E).contiguous()
    Bt = kw["B"].float().transpose(1, 2).contiguous()
    Ct = kw["C"].float().transpose(1, 2).contiguous()
    return A2, Bt, Ct


def main():
    shapes = [(8, 4096, 2048, 16), (16, 1536, 1024, 16), (1, 1536, 4096, 16)]
    variants = [(8, 32, 4), (8, 64, 8), (8, 16, 2), (4, 32, 4)]
    for shape in shapes:
        for dtn, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
            kw = bench_gpu.make(*shape, dtype)
            ref = bench_gpu.ours_fwd(kw)
            t_lib = t(lambda: bench_gpu.ours_fwd(kw))
            prep = prep_of(kw)
            t_prep = t(lambda: prep_of(kw))
            batch, dim, L, N = shape
            NCK = L // 256 + 1
            for TT, BD, W in variants:
                out = torch.full_like(kw["u"], float("nan"))
                ck = torch.empty(batch, dim, NCK, 16, device="cuda")
                try:
                    proto(kw, TT, BD, W, out, ck, prep)
                    torch.cuda.synchronize()
                    err = bench_gpu.rel(out, ref[0])
                    errs = bench_gpu.rel(ck[:, :, -1], ref[1])
                    tk = t(lambda: proto(kw, TT, BD, W, out, ck, prep))
                except Exception as e:
                    print("ERR", shape, dtn, TT, BD, W, repr(e)[:300])
                    continue
                r = dict(
                    shape=shape,
                    dtype=dtn,
                    TT=TT,
                    BD=BD,
                    W=W,
                    lib_ms=t_lib,
                    proto_ms=tk,
                    prep_ms=t_prep,
                    err=err,
                    err_state=errs,
                )
                res.append(r)
                print(json.dumps(r), flush=True)
    json.dump(
        res, open(os.path.join(os.environ.get("OUT", "/tmp"), "probe_split.json"), "w"), indent=1
    )
    for r in res:
        print(
            f"{'x'.join(map(str, r['shape']))} {r['dtype']} TT{r['TT']} B{r['BD']}w{r['W']}: lib {r['lib_ms']:.3f} proto {r['proto_ms']:.3f}+prep {r['prep_ms']:.3f} err {r['err']:.1e}/{r['err_state']:.1e}"
        )


if __name__ == "__main__":
    main()
