# ruff: noqa: B023
"""Bisect the library forward against the prototype: patched copies of triton_fwd.py (one library
feature removed or inlined each), timed beside the prototype on the same buffers, outputs compared
with the unpatched library kernel."""

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
INLINE = """        if not LOCAL:
            o_tt = t0 + o_t
            m_t = o_tt < t_end
            m = m_d[:, None] & m_t[None, :]
            p = row[:, None] + o_tt[None, :]
            b_u = tl.load(u + p, mask=m, other=0.0).to(tl.float32)
            b_dt = tl.load(delta + p, mask=m, other=0.0).to(tl.float32)
            b_dt = _softplus(b_dt + b_bias[:, None])
            b_dt = tl.where(m, b_dt, 0.0)
            b_du = b_dt * b_u
            b_y = tl.zeros_like(b_u)
            for j in tl.static_range(TT):
                m_j = t0 + j < t_end
                b_B = tl.load(p_B + (t0 + j) * NP, mask=m_j, other=0.0)
                b_C = tl.load(p_C + (t0 + j) * NP, mask=m_j, other=0.0)
                b_dtj = _col(b_dt, o_t, j)
                h = tl.exp2(b_dtj[:, None] * b_A2) * h + _col(b_du, o_t, j)[:, None] * b_B[None, :]
                b_yj = tl.sum(h * b_C[None, :], axis=1)
                b_y = tl.where(o_t[None, :] == j, b_yj[:, None], b_y)
            b_y += b_D[:, None] * b_u
            b_z = tl.load(z + p, mask=m, other=0.0).to(tl.float32)
            b_y *= b_z * _sigmoid(b_z)
            tl.store(out + p, b_y.to(out.dtype.element_ty), mask=m)
        else:
          h, dt_sum = _fwd_tile(
"""
PATCHES = {
    "base": [],
    "inline": [("        h, dt_sum = _fwd_tile(\n", INLINE)],
    "final_uncond": [
        (
            "    elif c1 == NC:\n        tl.store(p_ck + NC * NP, h, mask=m_d[:, None])  # the final entry",
            "    else:\n        tl.store(p_ck + NC * NP, h, mask=m_d[:, None])",
        )
    ],
    "no_ckstore": [("            if t0 % CK == 0:\n", "            if t0 < 0:\n")],
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
    names = ["base", "inline", "final_uncond", "no_ckstore", "pid1d", "inline+final_uncond+pid1d"]
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
                k[(triton.cdiv(dim, 32), batch, 1)](
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
                run(k, out, ck)
                torch.cuda.synchronize()
                outs[n] = out
                same = torch.equal(out, outs["base"])
                res.append(f"{n} {t(lambda: run(k, out, ck)):.3f}{'' if same else ' DIFF'}")
            print(shape[:3], dtn, " | ".join(res), flush=True)


if __name__ == "__main__":
    main()
