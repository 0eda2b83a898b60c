"""Max relative errors (vs the float64 reference) of the Triton selective-scan kernels on GPU, per
dtype and output, over the GPU test grid, with and without the L split; prints one JSON line per
dtype. Uses the GPU test's helpers so the numbers are those the tests check.

    PYTHONPATH=src python benchmarks/selective_scan/gpu_errors.py [cuda|cpu] [BWD_VARIANT]

(cpu: an interpreter smoke run.) With BWD_VARIANT
"split" or "lane" the grid's lengths are multiples of 16 (``triton_bwd_split.applies``),
every case must have run the split path, and "lane" must not have fallen back.
"""

from __future__ import annotations

import json
import sys

import torch

sys.path.insert(0, "tests")
sys.path.insert(0, "tests/ops/selective_scan")
import conftest  # noqa: F401, I001  (first: TRITON_INTERPRET=1 without CUDA, before any kernel)
import test_selective_scan_triton as T

from ssmscan.ops.selective_scan import triton_bwd, triton_bwd_split, triton_common
from ssmscan.testing import rel_error

CASES = [(2, 64, 63, 16, None), (1, 96, 1000, 16, 3), (4, 2048, 600, 16, None), (1, 64, 517, 16, 2)]
SPLIT_CASES = [
    (2, 64, 512, 16, None),
    (1, 96, 2048, 12, 3),
    (4, 2048, 768, 16, None),
    (1, 64, 784, 16, 2),
]


def main():
    device = sys.argv[1] if len(sys.argv) > 1 else "cuda"
    variant = sys.argv[2] if len(sys.argv) > 2 else triton_bwd.BWD_VARIANT
    triton_bwd.BWD_VARIANT = variant
    cases = CASES if variant not in ("split", "lane") else SPLIT_CASES
    if device != "cuda":  # an interpreter smoke run
        cases = (
            [(1, 4, 63, 4, None)] if variant not in ("split", "lane") else [(1, 8, 63, 16, None)]
        )
    seen: list[bool] = []
    real_applies = triton_bwd_split.applies

    def spy(*a):
        seen.append(real_applies(*a))
        return seen[-1]

    triton_bwd_split.applies = spy
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
        if variant in ("split", "lane") and not all(seen):
            raise SystemExit(f"the split path did not run for every case: {seen}")
        if triton_bwd.BWD_VARIANT != variant:  # the lane kernel's layout check fell back
            raise SystemExit(f"BWD_VARIANT {variant} fell back to {triton_bwd.BWD_VARIANT}")
        print(
            json.dumps(
                {
                    "dtype": str(dtype).split(".")[-1],
                    "bwd": variant,
                    **{k: float(f"{v:.3g}") for k, v in worst.items()},
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
