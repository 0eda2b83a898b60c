"""Compile a Triton kernel for sm_90 (H100 / H200) without a GPU, specialized as Triton's JIT
would specialize real arguments: for the layout and compile checks
(``tests/ops/selective_scan/*_check.py``). Needs Triton's CUDA backend (ptxas ships with it);
imported by those scripts only, not by ``ssmscan.testing``. (The SASS report,
``benchmarks/selective_scan/sass_report.py``, records the launchers' own launches instead.)"""

from __future__ import annotations

import inspect
from collections.abc import Collection
from typing import Any

import triton
from triton.backends.compiler import GPUTarget

SM90 = GPUTarget("cuda", 90, 32)


def compile_sm90(
    kernel: Any,
    values: dict[str, Any],
    num_warps: int,
    unaligned: Collection[str] = (),
    maxnreg: int | None = None,
) -> Any:
    """``triton.compile`` of ``kernel`` for sm_90 with one value per parameter (extra keys are
    ignored): a str is a pointer of that Triton type ("*fp32"), 16-byte aligned unless its name
    is in ``unaligned``; None (an absent tensor), a bool, or any value of a constexpr parameter,
    a constexpr; an int equal to 1 the constant Triton makes of it; other ints i32, marked
    divisible by 16 when they are.
    A parameter with a default may be left out (its default, as the JIT does).
    ``maxnreg``: a register cap (the launch option).
    Returns the compiled kernel (``.asm["ttgir"]``, ``["cubin"]``, ``.metadata``)."""
    sig, const, attrs = {}, {}, {}
    defaults = {
        p.name: p.default for p in kernel.params if p.default is not inspect.Parameter.empty
    }
    for i, name in enumerate(kernel.arg_names):
        v = values[name] if name in values or name not in defaults else defaults[name]
        if isinstance(v, str):
            sig[name] = v
            if name not in unaligned:
                attrs[(i,)] = [["tt.divisibility", 16]]
        elif v is None or isinstance(v, bool) or i in kernel.constexprs:
            sig[name] = "constexpr"
            const[name] = v
        elif v == 1:  # Triton specializes an int equal to 1 as a constant
            sig[name] = "constexpr"
            const[name] = 1
        else:
            sig[name] = "i32"
            if v % 16 == 0:  # ... and marks one divisible by 16
                attrs[(i,)] = [["tt.divisibility", 16]]
    src = triton.compiler.ASTSource(fn=kernel, signature=sig, constexprs=const, attrs=attrs)
    options: dict[str, int] = {"num_warps": num_warps}
    if maxnreg:  # a register cap, as the launch option
        options["maxnreg"] = maxnreg
    return triton.compile(src, target=SM90, options=options)
