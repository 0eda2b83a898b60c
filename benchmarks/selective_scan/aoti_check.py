"""AOTInductor check on GPU: a module calling ``ssmscan::selective_scan_fwd`` is exported, packaged
with ``aoti_compile_and_package``, loaded in a fresh process and compared with eager.

    PYTHONPATH=src python benchmarks/selective_scan/aoti_check.py build DIR [bf16|fp32 [B D L]]
    PYTHONPATH=src python benchmarks/selective_scan/aoti_check.py load DIR [bf16|fp32 [B D L]]
    (load: in a fresh process; B D L the shape, default 2 64 300)

On the lent H200 machine Inductor's C++ compiler (``CXX``: /opt/gcc/bin/g++) builds the package's
wrapper with its own copy of the C++ runtime's locale / regex code while the process has the
system libstdc++ loaded; the wrapper then crashes in ``std::regex`` (``parse_device_str``) at
load. Build with ``CXX=/usr/bin/g++`` (the system compiler), or load with that libstdc++
preloaded (``LD_PRELOAD=$(g++ -print-file-name=libstdc++.so.6)``); see ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import os
import sys

import torch


class ScanBlock(torch.nn.Module):
    def __init__(self, dim: int, N: int):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.A = torch.nn.Parameter(-torch.exp(0.5 * torch.randn(dim, N, generator=g)))
        self.D = torch.nn.Parameter(torch.randn(dim, generator=g))
        self.bias = torch.nn.Parameter(torch.full((dim,), -4.0))

    def forward(self, u, delta, B, C, z):
        out, last, _ = torch.ops.ssmscan.selective_scan_fwd(
            u, delta, self.A, B, C, self.D, z, self.bias, None, True
        )
        return out * 2.0, last


def inputs(dim=64, L=300, N=16, batch=2, dtype=torch.float32):
    g = torch.Generator().manual_seed(1)
    r = lambda *s: torch.randn(*s, generator=g).to(dtype).cuda()  # noqa: E731
    return (
        r(batch, dim, L),
        r(batch, dim, L) * 0.5,
        r(batch, N, L),
        r(batch, N, L),
        r(batch, dim, L),
    )


def main():
    mode, path = sys.argv[1], sys.argv[2]
    dtype = torch.bfloat16 if sys.argv[3:4] == ["bf16"] else torch.float32
    batch, dim, L = (int(x) for x in sys.argv[4:7]) if len(sys.argv) > 4 else (2, 64, 300)
    import ssmscan  # noqa: F401

    torch.manual_seed(0)
    model = ScanBlock(dim, 16).cuda()
    args = inputs(dim=dim, L=L, batch=batch, dtype=dtype)
    if mode == "build":
        with torch.no_grad():
            ref = model(*args)
        ep = torch.export.export(model, args)
        nodes = [n.target for n in ep.graph.nodes if n.op == "call_function"]
        print("exported nodes:", nodes)
        pkg = torch._inductor.aoti_compile_and_package(
            ep, package_path=os.path.join(path, "scan.pt2")
        )
        torch.save([r.cpu() for r in ref], os.path.join(path, "ref.pt"))
        print("packaged", pkg)
    else:
        runner = torch._inductor.aoti_load_package(os.path.join(path, "scan.pt2"))
        got = runner(*args)
        ref = torch.load(os.path.join(path, "ref.pt"))
        errs = [
            ((g.cpu().double() - r.double()).abs().max() / r.double().abs().max()).item()
            for g, r in zip(got, ref)
        ]
        print(f"AOTI fresh-process ({dtype}) max rel errors vs eager:", errs)
        assert all(e < 1e-6 for e in errs), errs
        print("AOTI_OK")


if __name__ == "__main__":
    main()
