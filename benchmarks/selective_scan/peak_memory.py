"""Peak GPU memory of one forward+backward of the selective scan: ssmscan's public API against
mamba-ssm's CUDA kernel (its ``selective_scan_cuda.fwd`` / ``bwd``, what its autograd Function
calls), each measured as ``torch.cuda.max_memory_allocated`` above the live inputs, in MB.

    PYTHONPATH=src:/tmp/mbuild python benchmarks/selective_scan/peak_memory.py [B D L N] [--dtype bf16]
"""

from __future__ import annotations

import argparse
import json

import torch

import ssmscan
from ssmscan.testing import make_selective_scan_inputs


def peak_mb(fn) -> float:
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("shape", nargs="*", type=int, default=[8, 4096, 2048, 16])
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    args = ap.parse_args()
    batch, dim, L, N = args.shape
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    kw = make_selective_scan_inputs(batch, dim, L, N, dtype=dtype, device="cuda")
    dout = torch.randn_like(kw["u"])
    names = ["u", "delta", "A", "B", "C", "D", "z", "delta_bias"]
    leaves = {k: kw[k].detach().requires_grad_() for k in names}

    def ours() -> None:
        out = ssmscan.selective_scan(**leaves, delta_softplus=True)
        torch.autograd.grad(out, list(leaves.values()), dout)

    row = {"shape": args.shape, "dtype": args.dtype, "ssmscan_mb": round(peak_mb(ours), 1)}
    try:
        import selective_scan_cuda as mb
    except ImportError:
        mb = None
    if mb is not None:
        B4, C4 = kw["B"].unsqueeze(1), kw["C"].unsqueeze(1)
        args_ = (kw["u"], kw["delta"], kw["A"], B4, C4, kw["D"], kw["z"], kw["delta_bias"])

        def theirs() -> None:
            out, x, _ = mb.fwd(*args_, True)
            mb.bwd(*args_, dout, x, out, None, True, False)

        row["mamba_ssm_mb"] = round(peak_mb(theirs), 1)
    print(json.dumps(row))


if __name__ == "__main__":
    main()
