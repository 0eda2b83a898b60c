# ruff: noqa: B023
"""Round 6: the library forward after "C_t loaded with B_t" (probe5's "inline" finding), patched
copies timed beside the prototype on the same buffers, outputs compared with the unpatched kernel,
registers / spills printed."""

import importlib.util
import os
import sys

import torch
import triton

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import bench_gpu
import fwd_split
from probe_split import prep_of, t

from ssmscan.ops.selective_scan import op as _op  # noqa: F401

SRC = os.path.join(
    os.path.dirname(__file__), "../../../src/ssmscan/ops/selective_scan/triton_fwd.py"
)
PATCHES = {
    "base": [],
    "c_after": [  # the order before this round: C_t loaded after the update
        (
            "        if not LOCAL:  # C_t loaded with B_t",
            "        if LOCAL:  # C_t loaded with B_t",
        ),
        (
            "        if not LOCAL:\n            b_yj",
            "        if not LOCAL:\n            b_C = tl.load(p_C + (t0 + j) * NP, mask=m_j, other=0.0)\n            b_yj",
        ),
    ],
    "final_uncond": [
        (
            "    elif c1 == NC:\n        tl.store(p_ck + NC * NP, h, mask=m_d[:, None])  # the final entry",
            "    else:\n        tl.store(p_ck + NC * NP, h, mask=m_d[:, None])",
        )
    ],
    "pid1d": [
        (
            "    i_s = tl.program_id(2)\n    NSEG = tl.num_programs(2)\n",
            "    i_s = 0\n    NSEG = 1\n",
        )
    ],
}


def variant(name):
    s = open(SRC).read()
    for part in name.split("+"):
        for old, new in PATCHES[part]:
            assert old in s, (name, old[:50])
            s = s.replace(old, new)
    path = f"/tmp/fwd_{name.replace('+', '_')}.py"
    open(path, "w").write(s)
    spec = importlib.util.spec_from_file_location(f"fwd_{name.replace('+', '_')}", path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m._selective_scan_fwd_kernel


def main():
    names = ["base", "c_after", "final_uncond", "pid1d", "final_uncond+pid1d"]
    kernels = {n: variant(n) for n in names}
    for shape in [(8, 4096, 2048, 16), (16, 1536, 1024, 16)]:
        for dtn, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
            kw = bench_gpu.make(*shape, dtype)
            batch, dim, L, N = shape
            A2, Bt, Ct = prep_of(kw)
            NCK = L // 256 + 1
            dummy = torch.empty(16, device="cuda")
            outs = {}

            def run(k, out, ck):
                return k[(triton.cdiv(dim, 32), batch, 1)](
                    kw["u"],
                    kw["delta"],
                    A2,
                    Bt[:, None],
                    Ct[:, None],
                    kw["D"],
                    kw["z"],
                    kw["delta_bias"],
                    dummy,
                    out,
                    ck,
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
                    BLOCK_D=32,
                    HAS_D=True,
                    HAS_Z=True,
                    HAS_BIAS=True,
                    HAS_INIT=False,
                    LOCAL=False,
                    TT=8,
                    SPLIT=False,
                    num_warps=4,
                )

            res = []
            out_p = torch.empty_like(kw["u"])
            ck_p = torch.empty(batch, dim, NCK, 16, device="cuda")

            def run_p():
                fwd_split.fwd_split_kernel[(triton.cdiv(dim, 32), batch, 1)](
                    kw["u"],
                    kw["delta"],
                    A2,
                    Bt,
                    Ct,
                    kw["D"],
                    kw["z"],
                    kw["delta_bias"],
                    out_p,
                    ck_p,
                    dim,
                    L,
                    NCK,
                    NCK - 1,
                    1,
                    F_TEND=False,
                    F_INIT=True,
                    F_GRP=True,
                    NP=16,
                    CK=256,
                    BLOCK_D=32,
                    TT=8,
                    num_warps=4,
                )

            res.append(f"proto2 {t(run_p):.3f}")
            for n, k in kernels.items():
                out = torch.empty_like(kw["u"])
                ck = torch.empty(batch, dim, NCK, 16, device="cuda")
                ck_k = run(k, out, ck)
                torch.cuda.synchronize()
                outs[n] = out
                same = torch.equal(out, outs["base"])
                res.append(
                    f"{n} {t(lambda: run(k, out, ck)):.3f}{'' if same else ' DIFF'} r{ck_k.n_regs}s{ck_k.n_spills}"
                )
            print(shape[:3], dtn, " | ".join(res), flush=True)


if __name__ == "__main__":
    main()
