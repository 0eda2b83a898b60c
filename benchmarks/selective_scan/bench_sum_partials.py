# ruff: noqa: B023  (lambdas used within the iteration)
"""The backward's dB / dC partial sums alone: ``torch.sum`` + transposing copy (the launcher's
path without ``FINISH_KERNEL``) against ``_selective_scan_bwd_sum_partials_kernel`` at several
(group size U, values per program, pipelining, warps), on partials of the benchmark shapes'
size (random, checked against the torch path first). Prints ms and GB/s of partials read.

    PYTHONPATH=src python benchmarks/selective_scan/bench_sum_partials.py
"""

from __future__ import annotations

import itertools

import torch
import triton
from triton.testing import do_bench

from ssmscan.ops.common.triton_launch import launcher
from ssmscan.ops.selective_scan import triton_bwd

# (nblk, batch, L) of the lane backward at the benchmark shapes (32 channels per block), NP 16
CASES = {
    "8x4096x2048": (128, 8, 2048),
    "16x1536x1024": (48, 16, 1024),
    "1x1536x4096": (48, 1, 4096),
}
NP = N = 16


def torch_path(part, dB, dC, nblk, batch, L):
    for grad, p in ((dB, part[0]), (dC, part[1])):
        red = p.view(1, nblk, batch, L, NP).sum(1)[..., :N].permute(1, 0, 3, 2)
        grad.view(batch, 1, N, L).copy_(red)


def kernel_path(part, dB, dC, nblk, batch, L, U, values, pipe, warps):
    block_l = max(1, values // NP)
    launcher(triton_bwd._selective_scan_bwd_sum_partials_kernel)[
        (triton.cdiv(L, block_l), batch, 2)
    ](
        part,
        dB,
        dC,
        nblk,
        batch,
        L,
        1,
        N=N,
        NP=NP,
        BLOCK_L=block_l,
        U=U,
        PIPE=pipe,
        num_warps=warps,
    )


def main() -> None:
    for name, (nblk, batch, L) in CASES.items():
        part = torch.randn(2, nblk, batch, L, NP, device="cuda")
        gb = part.numel() * 4 / 1e9
        ref = [torch.empty(batch, N, L, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
        torch_path(part, *ref, nblk, batch, L)
        ms = do_bench(lambda: torch_path(part, *ref, nblk, batch, L))
        print(
            f"{name} partials {gb * 1e3:.0f} MB: torch.sum+copy {ms * 1e3:.1f} us ({gb / ms * 1e3:.0f} GB/s)"
        )
        for U, values, pipe, warps in itertools.product(
            (4, 8), (256, 512, 1024), (False, True), (4,)
        ):
            out = [torch.empty_like(r) for r in ref]
            kernel_path(part, *out, nblk, batch, L, U, values, pipe, warps)
            err = max((o.float() - r.float()).abs().max().item() for o, r in zip(out, ref))
            ms = do_bench(lambda: kernel_path(part, *out, nblk, batch, L, U, values, pipe, warps))
            print(
                f"  U={U} values={values} pipe={int(pipe)} warps={warps}: {ms * 1e3:7.1f} us "
                f"{gb / ms * 1e3:5.0f} GB/s  max diff vs torch {err:.2e}",
                flush=True,
            )


if __name__ == "__main__":
    main()
