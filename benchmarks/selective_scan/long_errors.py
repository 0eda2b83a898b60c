"""Max relative errors (vs float64) at 2^20 + a few steps, per output, for every Triton backward
main kernel with and without the L split, and for the C kernel in fp32: the numbers behind
``tests/ops/selective_scan/test_long_sequences.py`` (Note [long sums]). One JSON line per run.

    PYTHONPATH=src python benchmarks/selective_scan/long_errors.py [cuda|cpu]

(cpu: the C kernel's line only.)
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch

sys.path.insert(0, "tests")
sys.path.insert(0, "tests/ops/selective_scan")
import conftest  # noqa: F401, I001  (first: TRITON_INTERPRET=1 without CUDA, before any kernel)
import test_long_sequences as M

from ssmscan.testing import rel_error


def _errors(got, ref) -> dict[str, float]:
    names = ("out", "last_state", "checkpoints")
    errs = {n: rel_error(g, r) for n, g, r in zip(names, got[:3], ref[:3])}
    errs.update({f"d{k}": rel_error(g, ref[3][k]) for k, g in got[3].items()})
    return {k: float(f"{v:.3g}") for k, v in errs.items()}


def main() -> None:
    device = sys.argv[1] if len(sys.argv) > 1 else "cuda"
    t = time.perf_counter()
    kw, dout, dlast = M._case(4, M.L_ODD, None, torch.float32)
    got = M._c_kernel(kw, dout, dlast, torch.float32)
    ref = M._oracle(4, M.L_ODD, None, torch.float32)
    row = {"kernel": "cpu-fp32", "L": M.L_ODD, "dim": 4, **_errors(got, ref)}
    print(json.dumps({**row, "s": round(time.perf_counter() - t, 1)}), flush=True)
    if device != "cuda":
        return
    from ssmscan.ops.selective_scan import triton_bwd, triton_common

    T = M._triton_tests()
    for L, variant in ((M.L_ODD, "lane"), (M.L_16, "lane"), (M.L_16, "split")):
        kw, dout, dlast = M._case(32, L, 2, torch.float32)
        ref = M._oracle(32, L, 2, torch.float32)
        kw_gpu = {k: (v.cuda() if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}
        for target in (None, 0):
            t = time.perf_counter()
            triton_bwd.BWD_VARIANT = variant
            saved = triton_common.TARGET_WARPS, triton_common.FWD_TARGET_WARPS
            if target is not None:
                triton_common.TARGET_WARPS = triton_common.FWD_TARGET_WARPS = target
            (out, last, ckpt), grads = T._run_launchers(kw_gpu, dout.cuda(), dlast.cuda())
            torch.cuda.synchronize()
            triton_common.TARGET_WARPS, triton_common.FWD_TARGET_WARPS = saved
            got = (out, last, ckpt, {k: grads[k] for k in ref[3]})
            seg = "segments" if target is None else "one-segment"
            row = {"kernel": f"{variant}/{seg}", "L": L, "dim": 32, **_errors(got, ref)}
            print(json.dumps({**row, "s": round(time.perf_counter() - t, 1)}), flush=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
