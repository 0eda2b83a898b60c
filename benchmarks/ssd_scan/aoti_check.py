"""AOTInductor check on GPU: a module calling ``ssmscan::ssd_scan_fwd`` (the Triton kernels) is
exported, packaged with ``aoti_compile_and_package``, loaded in a fresh process and compared
with eager.

    PYTHONPATH=src python benchmarks/ssd_scan/aoti_check.py build DIR [bf16|fp32 [B L H P G N]]
    PYTHONPATH=src python benchmarks/ssd_scan/aoti_check.py load DIR [bf16|fp32 [B L H P G N]]
    (load: in a fresh process; the shape defaults to 2 300 8 64 2 128)

Build with ``CXX=/usr/bin/g++`` on the lent H200 machine (``benchmarks/selective_scan/
aoti_check.py`` says why).
"""

from __future__ import annotations

import os
import sys

import torch


class SSDBlock(torch.nn.Module):
    def __init__(self, nheads: int, headdim: int):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.A_log = torch.nn.Parameter(0.5 * torch.randn(nheads, generator=g))
        self.D = torch.nn.Parameter(torch.randn(nheads, headdim, generator=g))
        self.dt_bias = torch.nn.Parameter(torch.full((nheads,), -4.0))

    def forward(self, x, dt, B, C, z):
        out, final = torch.ops.ssmscan.ssd_scan_fwd(
            x, dt, -torch.exp(self.A_log), B, C, self.D, z, self.dt_bias, None, None, True,
            0.0, float("inf"), 64,
        )  # fmt: skip
        return out * 2.0, final


def inputs(batch, L, H, P, G, N, dtype):
    g = torch.Generator().manual_seed(1)

    def r(*s):
        return torch.randn(*s, generator=g).to(dtype).cuda()

    return (
        r(batch, L, H, P),
        r(batch, L, H),
        r(batch, L, G, N),
        r(batch, L, G, N),
        r(batch, L, H, P),
    )


def main():
    mode, path = sys.argv[1], sys.argv[2]
    dtype = torch.bfloat16 if sys.argv[3:4] == ["bf16"] else torch.float32
    shape = tuple(int(v) for v in sys.argv[4:10]) if len(sys.argv) > 4 else (2, 300, 8, 64, 2, 128)
    import ssmscan  # noqa: F401

    model = SSDBlock(shape[2], shape[3]).cuda()
    args = inputs(*shape, dtype)
    if mode == "build":
        with torch.no_grad():
            ref = model(*args)
        ep = torch.export.export(model, args)
        nodes = [n.target for n in ep.graph.nodes if n.op == "call_function"]
        print("exported nodes:", nodes)
        pkg = torch._inductor.aoti_compile_and_package(
            ep, package_path=os.path.join(path, "ssd.pt2")
        )
        torch.save([t.cpu() for t in ref], os.path.join(path, "ssd_ref.pt"))
        print("packaged", pkg)
    else:
        runner = torch._inductor.aoti_load_package(os.path.join(path, "ssd.pt2"))
        got = runner(*args)
        ref = torch.load(os.path.join(path, "ssd_ref.pt"))
        errs = [
            ((g.cpu().double() - r.double()).abs().max() / r.double().abs().max()).item()
            for g, r in zip(got, ref)
        ]
        print(f"AOTI fresh-process ({dtype}) max rel errors vs eager:", errs)
        assert all(e < 1e-6 for e in errs), errs
        print("AOTI_OK")


if __name__ == "__main__":
    main()
