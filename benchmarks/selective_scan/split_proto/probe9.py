# ruff: noqa: B023
"""Round 9: forward variants on top of the library kernel after probe8 (z back in the epilogue,
unmasked B_t / C_t loads on padded buffers, other TT / BLOCK_D / warps / num_stages), same buffers,
outputs compared with the unpatched kernel, registers printed."""

import os
import sys

import torch
import triton

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import bench_gpu
import probe6
from probe_split import prep_of, t

ZLOAD = (
    "    if HAS_Z and not LOCAL:\n        b_z = tl.load(z + p, mask=m, other=0.0).to(tl.float32)\n"
)
probe6.PATCHES.update(
    {
        "z_after": [
            (ZLOAD, ""),
            (
                "        if HAS_Z:\n            b_y *= b_z",
                "        if HAS_Z:\n            b_z = tl.load(z + p, mask=m, other=0.0).to(tl.float32)\n            b_y *= b_z",
            ),
        ],
        "nomask": [  # B_t / C_t buffers padded by TT rows: no per-step predicate
            (
                "(tl.load(p_B + (t0 + j) * NP, mask=m_j, other=0.0),)",
                "(tl.load(p_B + (t0 + j) * NP),)",
            ),
            (
                "(tl.load(p_C + (t0 + j) * NP, mask=m_j, other=0.0),)",
                "(tl.load(p_C + (t0 + j) * NP),)",
            ),
        ],
    }
)
# (patches, TT, BLOCK_D, warps, num_stages)
VARIANTS = [
    ("base", 8, 32, 4, 3),
    ("z_after", 8, 32, 4, 3),
    ("nomask", 8, 32, 4, 3),
    ("base", 8, 32, 4, 1),
    ("base", 4, 32, 4, 3),
    ("base", 8, 16, 2, 3),
    ("base", 8, 64, 8, 3),
    ("base", 8, 128, 16, 3),
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

            # same layout plus 16 rows of tail, so unmasked loads past L stay in bounds (L is a
            # multiple of TT here: no step is padded, results identical)
            def pad(x):
                flat = torch.zeros(x.numel() + 16 * 16, device="cuda")
                flat[: x.numel()] = x.flatten()
                return flat[: x.numel()].view(x.shape)

            Btp, Ctp = pad(Bt), pad(Ct)
            NCK = L // 256 + 1
            dummy = torch.empty(16, device="cuda")
            ref = None
            res = []
            for name, TT, BD, W, S in VARIANTS:
                k = kernels[name]
                b_, c_ = (Btp, Ctp) if name == "nomask" else (Bt, Ct)

                def run(out, ck):
                    return k[(triton.cdiv(dim, BD), batch, 1)](
                        kw["u"], kw["delta"], A2, b_[:, None], c_[:, None], kw["D"], kw["z"],
                        kw["delta_bias"], dummy, out, ck, dummy, dummy, dim, L, N, 1, NCK, NCK - 1,
                        SOFTPLUS=True, NP=16, CK=256, BLOCK_D=BD, HAS_D=True, HAS_Z=True,
                        HAS_BIAS=True, HAS_INIT=False, LOCAL=False, TT=TT, SPLIT=False,
                        num_warps=W, num_stages=S,
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
                    f"{name}/TT{TT}/{BD}x{W}/s{S} {ms:.3f}{'' if same else ' DIFF'} r{c.n_regs}"
                )
            print(shape[:3], dtn, " | ".join(res), flush=True)


if __name__ == "__main__":
    main()
