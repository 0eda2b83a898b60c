"""Compile the selective scan's small Triton kernels for sm_90 without a GPU (run without
TRITON_INTERPRET, which the interpreter-based tests cannot replace: it accepts code the compiler
rejects, e.g. a variable of two pointer types across an if / else): ``_prep_bc_kernel`` with B
and C of equal and of different dtypes, and the finish kernel
(``_selective_scan_bwd_sum_partials_kernel``) with and without the optional sums. Prints one
"<name> ok" line per case; exits non-zero on the first failure."""

from __future__ import annotations

import itertools
import os
import sys

if os.environ.get("TRITON_INTERPRET") == "1":
    sys.exit("run without TRITON_INTERPRET=1: this compiles for sm_90")

from ssmscan.ops.selective_scan import triton_bwd_reduce, triton_common
from ssmscan.testing.triton_sm90 import compile_sm90


def main() -> None:
    for bt, ct in (("*bf16", "*fp32"), ("*fp32", "*fp32"), ("*fp16", "*fp16")):
        vals = dict(B=bt, C=ct, out="*fp32", batch=8, G=1, N=16, L=2048, LP=2064, sBb=32768,
                    sBg=0, sBn=2048, sBl=1, sCb=32768, sCg=0, sCn=1, sCl=16, NP=16, BLOCK_T=64)  # fmt: skip
        compile_sm90(triton_common._prep_bc_kernel, vals, 4)
        print(f"prep_bc {bt[1:]}/{ct[1:]} ok")
    for (dbt, dct), opt in itertools.product(
        (("*bf16", "*fp32"), ("*fp32", "*fp32")), (True, False)
    ):
        vals = dict(partB="*fp32", partC="*fp32", dB=dbt, dC=dct, NBG=128, batch=8, L=2048,
                    G=1, rows=8, dAp="*fp32", dA="*fp32", dDp="*fp32", dD="*fp32", dbp="*fp32", dbias="*fp32",
                    n_A=65536, dim=4096, N=16, NP=16, BLOCK_L=32, U=8, HAS_A=opt, HAS_D=opt,
                    HAS_BIAS=opt)  # fmt: skip
        compile_sm90(triton_bwd_reduce._selective_scan_bwd_sum_partials_kernel, vals, 4)
        print(f"sum_partials {dbt[1:]}/{dct[1:]} optional={opt} ok")


if __name__ == "__main__":
    main()
