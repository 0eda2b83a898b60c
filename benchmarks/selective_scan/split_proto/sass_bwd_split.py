"""Offline sm_90 resource report of bwd_split's kernel (registers, spills, SASS counts of the
reverse-tile loop): ``python sass_bwd_split.py [BLOCK_D warps TT KEEP_A dtype]``."""

import collections
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import bwd_split
import sass_report


def values(BLOCK_D, TT, KEEP_A, dt):
    v = {n: "*fp32" for n in bwd_split.bwd_split_kernel.arg_names}
    for n in ("dout", "u", "delta", "z", "du", "ddelta", "dz"):
        v[n] = f"*{dt}"
    v.update(dim=4096, L=2048, NCK=9, NP=16, CK=256, BLOCK_D=BLOCK_D, TT=TT, KEEP_A=KEEP_A)
    v.update(RS=False, PF=False, EMU=False)
    return v


if __name__ == "__main__":
    a = sys.argv[1:]
    BLOCK_D, warps, TT = (int(x) for x in (a[:3] if a else (8, 1, 8)))
    KEEP_A = (a[3] == "1") if len(a) > 3 else True
    dt = a[4] if len(a) > 4 else "fp32"
    meta, sass = sass_report.sass_of(
        bwd_split.bwd_split_kernel,
        values(BLOCK_D, TT, KEEP_A, dt),
        warps,
        os.environ.get("DUMP"),
        "bwd_split",
    )
    ops = collections.Counter(m.split(".")[0] for _, m, _ in sass_report.parse(sass))
    print(meta, "total", sum(ops.values()))
    print(
        {
            k: ops[k]
            for k in (
                "MUFU",
                "SHFL",
                "BAR",
                "STS",
                "LDS",
                "LDG",
                "STG",
                "LDL",
                "STL",
                "FFMA",
                "FMUL",
            )
        }
    )
