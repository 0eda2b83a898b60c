# ruff: noqa: B023
"""Round 8: forward variants of the library kernel after probe6 (all B_t / C_t of a tile loaded
first; z loaded with u / delta; other TT / BLOCK_D / warps), on the same buffers, outputs compared
with the unpatched kernel, registers / spills printed."""

import os
import sys

import torch
import triton

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import bench_gpu
import probe6
from probe_split import prep_of, t

LOADS = """        b_B = tl.load(p_B + (t0 + j) * NP, mask=m_j, other=0.0)
        if not LOCAL:  # C_t loaded with B_t, before the update (see the Note: 1.34 -> 1.04 ms)
            b_C = tl.load(p_C + (t0 + j) * NP, mask=m_j, other=0.0)
"""
probe6.PATCHES.update(
    {
        "prefetch": [
            (
                "    for j in tl.static_range(TT):\n        m_j = t0 + j < t_end\n" + LOADS,
                "    Bs = ()\n    Cs = ()\n    for j in tl.static_range(TT):\n"
                "        m_j = t0 + j < t_end\n"
                "        Bs = Bs + (tl.load(p_B + (t0 + j) * NP, mask=m_j, other=0.0),)\n"
                "        Cs = Cs + (tl.load(p_C + (t0 + j) * NP, mask=m_j, other=0.0),)\n"
                "    for j in tl.static_range(TT):\n        b_B = Bs[j]\n        b_C = Cs[j]\n",
            )
        ],
        "zfirst": [
            (
                "    b_dt = tl.load(delta + p, mask=m, other=0.0).to(tl.float32)\n",
                "    b_dt = tl.load(delta + p, mask=m, other=0.0).to(tl.float32)\n"
                "    b_z = tl.load(z + p, mask=m, other=0.0).to(tl.float32)\n",
            ),
            ("            b_z = tl.load(z + p, mask=m, other=0.0).to(tl.float32)\n", ""),
        ],
    }
)
# (patches, TT, BLOCK_D, warps)
VARIANTS = [
    ("base", 8, 32, 4),
    ("prefetch", 8, 32, 4),
    ("zfirst", 8, 32, 4),
    ("prefetch+zfirst", 8, 32, 4),
    ("base", 4, 32, 4),
    ("base", 16, 32, 4),
    ("base", 8, 64, 8),
    ("base", 8, 16, 2),
]


def main():
    kernels = {}
    for name, *_ in VARIANTS:
        kernels.setdefault(name, probe6.variant(name))
    for shape in [(8, 4096, 2048, 16), (16, 1536, 1024, 16)]:
        for dtn, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
            kw = bench_gpu.make(*shape, dtype)
            batch, dim, L, N = shape
            A2, Bt, Ct = prep_of(kw)
            NCK = L // 256 + 1
            dummy = torch.empty(16, device="cuda")
            ref = None
            res = []
            for name, TT, BD, W in VARIANTS:
                k = kernels[name]

                def run(out, ck):
                    return k[(triton.cdiv(dim, BD), batch, 1)](
                        kw["u"], kw["delta"], A2, Bt[:, None], Ct[:, None], kw["D"], kw["z"],
                        kw["delta_bias"], dummy, out, ck, dummy, dummy, dim, L, N, 1, NCK, NCK - 1,
                        SOFTPLUS=True, NP=16, CK=256, BLOCK_D=BD, HAS_D=True, HAS_Z=True,
                        HAS_BIAS=True, HAS_INIT=False, LOCAL=False, TT=TT, SPLIT=False,
                        num_warps=W,
                    )  # fmt: skip

                out = torch.empty_like(kw["u"])
                ck = torch.empty(batch, dim, NCK, 16, device="cuda")
                c = run(out, ck)
                torch.cuda.synchronize()
                if ref is None:
                    ref = out
                same = torch.equal(out, ref)
                ms = t(lambda: run(out, ck))
                res.append(
                    f"{name}/TT{TT}/{BD}x{W} {ms:.3f}{'' if same else ' DIFF'} r{c.n_regs}s{c.n_spills}"
                )
            print(shape[:3], dtn, " | ".join(res), flush=True)


if __name__ == "__main__":
    main()
