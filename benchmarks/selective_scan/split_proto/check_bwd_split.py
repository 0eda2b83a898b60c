"""bwd_split against the library's backward op (CPU: the C kernel, run with TRITON_INTERPRET=1;
CUDA: the library's Triton backward) on fresh random inputs, real configuration."""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../../../tests"))
import bwd_split

import conftest  # noqa: F401  (the interpreter's NumPy 2.4 shim on CPU)
from ssmscan.ops.selective_scan import op as _op  # noqa: F401  (registers the ops)

NAMES = ("du", "ddelta", "dA", "dB", "dC", "dD", "dz", "ddelta_bias")


def inputs(batch, dim, L, dtype, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    kw = dict(
        u=r(batch, dim, L).to(dtype),
        delta=(0.5 * r(batch, dim, L) - 1.0).to(dtype),
        A=-torch.exp(0.5 * r(dim, 16)),
        B=r(batch, 16, L),
        C=r(batch, 16, L),
        D=r(dim),
        z=r(batch, dim, L).to(dtype),
        delta_bias=0.1 * r(dim),
    )
    return {k: v.to(device) for k, v in kw.items()}


def compare(batch, dim, L, dtype=torch.float32, device="cpu", **cfg):
    kw = inputs(batch, dim, L, dtype, device)
    ops = torch.ops.ssmscan
    args = [kw[k] for k in ("u", "delta", "A", "B", "C", "D", "z", "delta_bias")]
    out, _last, ckpt = ops.selective_scan_fwd(*args, None, True)
    dout = torch.randn_like(out)
    ref = ops.selective_scan_bwd(dout, None, *args, None, ckpt, True)
    ref = [*ref[:5], *ref[5][:3]]
    ref = [ref[0], ref[1], ref[2], ref[3], ref[4], ref[5], ref[6], ref[7]]
    got = bwd_split.run(dout, *args, ckpt, **cfg)
    worst = 0.0
    for name, a, b in zip(NAMES, got, ref):
        e = ((a.double() - b.double()).abs().max() / b.double().abs().max()).item()
        worst = max(worst, e)
        print(f"  {name} {e:.2e}", end="")
    print()
    return worst


if __name__ == "__main__":
    dev = sys.argv[1] if len(sys.argv) > 1 else "cpu"
    for cfg in (
        dict(BLOCK_D=8, warps=1, TT=8, PF=True, RS=True),
        dict(BLOCK_D=8, warps=1, TT=4, KEEP_A=False, PF=True),
    ):
        print(cfg)
        w = compare(2, 16, 300, device=dev, **cfg)
        assert w < 1e-4, w
