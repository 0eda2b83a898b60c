"""Controls for the AOTInductor load crash (issue 4): package and load, in a fresh process each,
(a) a module of plain aten ops, (b) a toy Triton kernel registered with ``torch.library.triton_op``,
(c) the same toy kernel registered with ``ssmscan._library.triton_backed_op``. ``same:KIND``
builds and loads in one process. Which of them crash
tells whether the crash is ours.

    PYTHONPATH=src python benchmarks/selective_scan/aoti_probe.py all DIR
"""

from __future__ import annotations

import os
import subprocess
import sys

import torch
import triton
import triton.language as tl


@triton.jit
def _twice_kernel(x, out, n, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + o, 2.0 * tl.load(x + o, mask=o < n), mask=o < n)


def _twice(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    n = x.numel()
    torch.library.wrap_triton(_twice_kernel)[(triton.cdiv(n, 256),)](x, out, n, BLOCK=256)
    return out


def _register(kind: str):
    if kind == "triton_op":
        return torch.library.triton_op("aotiprobe::twice", _twice, mutates_args=())
    from ssmscan._library import triton_backed_op

    return triton_backed_op("probe_twice")(_twice)


class Model(torch.nn.Module):
    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind
        self.op = None if kind == "plain" else _register(kind)

    def forward(self, x):
        y = x.sin() * 2.0 if self.op is None else self.op(x)
        return y + 1.0


def main():
    mode, root = sys.argv[1], sys.argv[2]
    if mode == "all":
        for kind in ("plain", "triton_op", "backed"):
            for step in ("build", "load"):
                r = subprocess.run(
                    [sys.executable, "-X", "faulthandler", __file__, f"{step}:{kind}", root],
                    capture_output=True,
                    text=True,
                    timeout=300,
                )
                last = (r.stdout + r.stderr).strip().splitlines()[-3:]
                print(
                    f"{kind:10s} {step:5s} rc={r.returncode} {' | '.join(last)[-300:]}", flush=True
                )
        return
    step, kind = mode.split(":")
    path = os.path.join(root, f"{kind}.pt2")
    x = torch.randn(1000, device="cuda")
    if step in ("build", "same"):
        model = Model(kind)
        ep = torch.export.export(model, (x,))
        torch._inductor.aoti_compile_and_package(ep, package_path=path)
        print("built", flush=True)
    if step in ("load", "same"):
        if kind != "plain" and step == "load":
            _register(kind)  # the op's Python registration exists in the loading process too
        runner = torch._inductor.aoti_load_package(path)
        got = runner(x)
        want = (x.sin() * 2.0 if kind == "plain" else 2.0 * x) + 1.0
        print("max err", (got - want).abs().max().item(), "LOAD_OK")


if __name__ == "__main__":
    main()
