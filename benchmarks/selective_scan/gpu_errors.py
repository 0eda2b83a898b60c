"""Max relative errors (vs the float64 reference) of the Triton selective-scan kernels on GPU, per
dtype and output, over the GPU test grid, with and without the L split; prints one JSON line per
dtype. Uses the GPU test's helpers so the numbers are those the tests check.

    PYTHONPATH=src python benchmarks/selective_scan/gpu_errors.py
"""

from __future__ import annotations

import json
import sys

import torch

sys.path.insert(0, "tests")
sys.path.insert(0, "tests/ops/selective_scan")
import test_selective_scan_triton as T

import conftest  # noqa: F401  (TRITON_INTERPRET=1 without CUDA)
from ssmscan.ops.selective_scan import triton_common
from ssmscan.testing import rel_error

CASES = [(2, 64, 63, 16, None), (1, 96, 1000, 16, 3), (4, 2048, 600, 16, None), (1, 64, 517, 16, 2)]


def main():
    device = sys.argv[1] if len(sys.argv) > 1 else "cuda"
    cases = CASES if device == "cuda" else [(1, 4, 63, 4, None)]  # cpu: an interpreter smoke run
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        worst: dict[str, float] = {}
        for tw in (0, triton_common.TARGET_WARPS):
            triton_common.TARGET_WARPS = tw
            for batch, dim, L, N, groups in cases:
                kw, dout, dlast = T._inputs(
                    batch, dim, L, N, groups, True, True, True, dtype, device, seed=L + 7
                )
                (out, last, _ckpt), grads = T._run_launchers(kw, dout, dlast)
                r_out, r_last, r_grads = T._reference(kw, dout, dlast)
                errs = {"out": rel_error(out, r_out), "last_state": rel_error(last, r_last)}
                errs.update({f"d{k}": rel_error(g, r_grads[k]) for k, g in grads.items()})
                for k, v in errs.items():
                    worst[k] = max(worst.get(k, 0.0), v)
        print(
            json.dumps(
                {
                    "dtype": str(dtype).split(".")[-1],
                    **{k: float(f"{v:.3g}") for k, v in worst.items()},
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
