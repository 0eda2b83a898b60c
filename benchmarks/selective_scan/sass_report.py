"""Offline sm_90 resource / SASS report of the Triton selective-scan forward (no GPU needed).

Compiles ``_selective_scan_fwd_kernel`` for an H100/H200 target (``GPUTarget("cuda", 90, 32)``)
with the benchmark shapes' specialization (pointers and ints divisible by 16 marked as Triton's JIT
would), real configuration (z, D, delta_bias, softplus), the BLOCK_D / num_warps that
``triton_common.block_channels`` picks, then disassembles the cubin with the ``cuobjdump`` that
ships with Triton and prints registers, spills, shared memory and instruction counts: for the
whole kernel and per time step of the main loop (the backward branch spanning the most MUFU.EX2;
its count divided by the steps per iteration).

    python benchmarks/selective_scan/sass_report.py [--variant column tile] [--dump DIR]
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import tempfile

import triton
from triton.backends.compiler import GPUTarget

from ssmscan.ops.selective_scan import triton_common, triton_fwd
from ssmscan.ops.selective_scan.shapes import CHECKPOINT_LEN, num_checkpoints

SHAPES = [(8, 4096, 2048, 16), (16, 1536, 1024, 16), (1, 1536, 4096, 16), (1, 1024, 65536, 16)]
DTYPES = {"fp32": "fp32", "bf16": "bf16"}
TARGET = GPUTarget("cuda", 90, 32)
CUOBJDUMP = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")

# instruction classes counted (opcode prefix match on the SASS mnemonic)
CLASSES = (
    "MUFU.EX2",
    "MUFU",
    "LDG",
    "STG",
    "LDS",
    "STS",
    "SHFL",
    "BAR",
    "LDL",
    "STL",
    "FFMA",
    "FMUL",
)


def _sig(kernel, values: dict) -> tuple[dict, dict, dict]:
    """signature, constexprs, attrs for ASTSource from {arg name: value}; a str value is a pointer
    type (16-byte aligned), an int a runtime int (divisible-by-16 marked), others constexprs."""
    sig, const, attrs = {}, {}, {}
    for i, name in enumerate(kernel.arg_names):
        v = values[name]
        if isinstance(v, str):
            sig[name] = v
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif isinstance(v, bool) or i in kernel.constexprs:
            sig[name] = "constexpr"
            const[name] = v
        else:
            sig[name] = "i32"
            if v % 16 == 0:
                attrs[(i,)] = [["tt.divisibility", 16]]
    return sig, const, attrs


def fwd_values(batch: int, dim: int, L: int, N: int, dt: str, local: bool) -> tuple[dict, int]:
    NP = triton_common.pad_states(N)
    block_d, warps = triton_common.block_channels(batch, dim, 1)
    NCK = num_checkpoints(L)
    nseg, seg = triton_common.segments(batch * triton.cdiv(dim, block_d) * warps, NCK - 1)
    v = dict(
        u=f"*{dt}",
        delta=f"*{dt}",
        A2t="*fp32",
        Bt="*fp32",
        Ct="*fp32",
        Dv="*fp32",
        z=f"*{dt}",
        delta_bias="*fp32",
        init="*fp32",
        out=f"*{dt}",
        ckpt="*fp32",
        seg_state="*fp32",
        seg_dt="*fp32",
        dim=dim,
        L=L,
        N=N,
        G=1,
        NCK=NCK,
        SEG=seg,
        SOFTPLUS=True,
        NP=NP,
        CK=CHECKPOINT_LEN,
        BLOCK_D=block_d,
        HAS_D=True,
        HAS_Z=True,
        HAS_BIAS=True,
        HAS_INIT=False,
        LOCAL=local,
    )
    v.update(triton_fwd.variant_constexprs(4 if dt == "fp32" else 2))
    return v, warps, nseg


def sass_of(kernel, values: dict, warps: int, dump: str | None, tag: str) -> tuple[dict, str]:
    sig, const, attrs = _sig(kernel, values)
    src = triton.compiler.ASTSource(fn=kernel, signature=sig, constexprs=const, attrs=attrs)
    k = triton.compile(src, target=TARGET, options={"num_warps": warps})
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.cubin")
        with open(path, "wb") as f:
            f.write(k.asm["cubin"])
        sass = subprocess.run(
            [CUOBJDUMP, "-sass", path], capture_output=True, text=True, check=True
        ).stdout
        res = subprocess.run(
            [CUOBJDUMP, "-res-usage", path], capture_output=True, text=True, check=True
        ).stdout
    if dump:
        os.makedirs(dump, exist_ok=True)
        for ext in ("ttgir", "ptx"):
            with open(os.path.join(dump, f"{tag}.{ext}"), "w") as f:
                f.write(k.asm[ext])
        with open(os.path.join(dump, f"{tag}.sass"), "w") as f:
            f.write(sass)
    usage = dict(re.findall(r"(REG|STACK|SHARED|LOCAL):(\d+)", res))
    meta = dict(
        regs=usage["REG"], stack=usage["STACK"], local=usage["LOCAL"], shared=k.metadata.shared
    )
    return meta, sass


_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);")


def parse(sass: str) -> list[tuple[int, str, str]]:
    """[(address, mnemonic, operands)]."""
    return [(int(m[1], 16), m[3], m[4]) for m in _LINE.finditer(sass)]


def count(instrs) -> collections.Counter:
    c: collections.Counter = collections.Counter()
    for _, op, _ in instrs:
        for cls in CLASSES:
            if op.startswith(cls):
                c[cls] += 1
        if op.startswith(("LDG", "STG")):
            width = re.search(r"\.(64|128)\b", op)
            c[f"{op[:3]}.{width[1] if width else 32}"] += 1
    c["total"] = len(instrs)
    return c


def main_loop(instrs) -> list:
    """Instructions of the backward branch (loop) whose body has the most MUFU.EX2."""
    best: list = []
    best_ex2 = -1
    for addr, op, args in instrs:
        if op.startswith("BRA"):
            m = re.search(r"0x([0-9a-f]+)", args)
            if m and int(m[1], 16) < addr:
                body = [i for i in instrs if int(m[1], 16) <= i[0] <= addr]
                ex2 = sum(op2.startswith("MUFU.EX2") for _, op2, _ in body)
                if ex2 > best_ex2:
                    best, best_ex2 = body, ex2
    return best


def fmt(c: collections.Counter, per: float = 1.0) -> str:
    keys = ("total", "MUFU.EX2", "LDG.32", "LDG.64", "LDG.128", "STG.32", "STG.64", "STG.128")
    keys += ("LDS", "STS", "SHFL", "BAR", "LDL", "STL", "FFMA", "FMUL")
    return " ".join(f"{k}={c[k] / per:.3g}" for k in keys if c[k])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variant", nargs="*", default=None, help="FWD_VARIANT values (default: all)")
    ap.add_argument("--dtype", nargs="*", default=list(DTYPES))
    ap.add_argument("--shape", type=int, nargs=4, action="append", default=None)
    ap.add_argument("--local", action="store_true", help="also the LOCAL pass (L split)")
    ap.add_argument("--dump", default=None, help="write ttgir / ptx / sass here")
    a = ap.parse_args()
    variants = a.variant or list(triton_fwd.FWD_VARIANTS)
    shapes = [tuple(s) for s in a.shape] if a.shape else SHAPES
    old = triton_fwd.FWD_VARIANT
    for var in variants:
        triton_fwd.FWD_VARIANT = var
        for shape in shapes:
            for dt in a.dtype:
                for local in (False, True) if a.local else (False,):
                    v, warps, nseg = fwd_values(*shape, DTYPES[dt], local)
                    tag = f"{var}-{'x'.join(map(str, shape))}-{dt}{'-local' if local else ''}"
                    meta, sass = sass_of(
                        triton_fwd._selective_scan_fwd_kernel, v, warps, a.dump, tag
                    )
                    steps = v["TT"]
                    instrs = parse(sass)
                    loop = main_loop(instrs)
                    print(
                        f"{tag}: BLOCK_D={v['BLOCK_D']} warps={warps} NSEG={nseg} "
                        f"regs={meta['regs']} stack={meta['stack']} local={meta['local']} smem={meta['shared']}"
                    )
                    print(f"  kernel: {fmt(count(instrs))}")
                    print(f"  per step ({steps} steps/iter): {fmt(count(loop), steps)}")
    triton_fwd.FWD_VARIANT = old


if __name__ == "__main__":
    main()
