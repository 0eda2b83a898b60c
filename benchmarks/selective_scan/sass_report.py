"""Offline sm_90 resource / SASS report of the Triton selective-scan kernels (no GPU needed).

Runs the library's launchers (``triton_fwd.launch``, ``triton_bwd.launch``) on fake tensors of
the benchmark shapes, with the plans made for an H200's facts (``plan.H200``: sm_90, inline PTX)
passed in, and every launch recorded instead of run: the kernel, its grid, and the arguments as Triton's JIT would specialize them (dtypes,
16-byte alignment, ints equal to 1 or divisible by 16, constexprs, ``num_warps`` / ``maxnreg``).
Each distinct launch is compiled for sm_90 (``GPUTarget("cuda", 90, 32)``) and disassembled with
the ``cuobjdump`` that ships with Triton; printed per launch: registers, spills, shared memory,
instruction counts for the whole kernel and per time step of its main loop (the backward branch
spanning the most MUFU.EX2), and a hash of the SASS instructions (equal hashes: the same machine
code, so the same speed).

    python benchmarks/selective_scan/sass_report.py [--shape B D L N ...] [--dtype fp32 bf16]
        [--bwd] [--dump DIR] [--json OUT]
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import importlib
import json
import os
import re
import subprocess
import tempfile

import torch
import triton
from torch._subclasses.fake_tensor import FakeTensorMode

from ssmscan.ops.common import triton_launch
from ssmscan.ops.selective_scan import shapes, triton_bwd, triton_fwd
from ssmscan.ops.selective_scan.plan import H200

SHAPES = [(8, 4096, 2048, 16), (16, 1536, 1024, 16), (1, 1536, 4096, 16), (1, 1024, 65536, 16)]
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
CUOBJDUMP = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
SM90 = triton.backends.compiler.GPUTarget("cuda", 90, 32)
_TYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.int32: "i32"}

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


def specialize(jit, grid, args: tuple, kwargs: dict) -> dict:
    """A launch as Triton's JIT specializes it: signature, constexprs, divisibility attributes
    and launch options (``None`` tensors are the launcher's aligned fp32 placeholder)."""
    par = triton_launch._params(jit)
    values = dict(zip(par.names, args))
    values.update({k: v for k, v in kwargs.items() if k in par.index})
    options = {k: v for k, v in kwargs.items() if k not in par.index}
    sig, const, attrs = {}, {}, []
    for i, name in enumerate(par.names):
        v = values[name] if name in values else par.defaults.get(name)
        if par.const[i]:
            sig[name], const[name] = "constexpr", v
        elif v is None or isinstance(v, torch.Tensor):
            sig[name] = "*" + (_TYPES[v.dtype] if v is not None else "fp32")
            if v is None or (v.storage_offset() * v.element_size()) % 16 == 0:
                attrs.append(i)
        elif type(v) is bool:
            sig[name] = "i1"
        elif v == 1:
            sig[name], const[name] = "constexpr", 1
        else:
            sig[name] = "i32" if -(2**31) <= v < 2**31 else "i64"
            if v % 16 == 0:
                attrs.append(i)
    kernel = f"{jit.fn.__module__}.{jit.fn.__name__}"
    return dict(kernel=kernel, grid=list(grid), sig=sig, const=const, attrs=attrs, options=options)


def capture(batch: int, dim: int, L: int, N: int, dtype: torch.dtype, bwd: bool) -> list[dict]:
    """The launches of the forward (and with ``bwd`` the backward) at this shape, planned for an
    H200, recorded on fake tensors (nothing runs)."""
    launches: list[dict] = []

    def record(self, grid, *args, **kwargs):
        launches.append(specialize(self._jit, grid, args, kwargs))

    saved = triton_launch._Launcher._launch
    triton_launch._Launcher._launch = record
    try:
        with FakeTensorMode(allow_non_fake_inputs=True):
            u, delta, z, dout = (torch.empty(batch, dim, L, dtype=dtype) for _ in range(4))
            A, D, bias = torch.empty(dim, N), torch.empty(dim), torch.empty(dim)
            B, C = torch.empty(batch, N, L, dtype=dtype), torch.empty(batch, N, L, dtype=dtype)
            outs = shapes.empty_forward_outputs(u, A)
            plan = triton_fwd.plan_for(u, A, B, C, facts=H200)
            triton_fwd.launch(u, delta, A, B, C, D, z, bias, None, True, *outs, plan=plan)
            if bwd:
                launches.clear()
                grads = shapes.empty_backward_outputs(u, delta, A, B, C, D, z, bias, None)
                # the tensors whose alignment the planner reads, as ``triton_bwd.launch`` names them
                aligned = (dout, u, delta, D, z, bias, outs[2], grads[0], grads[1], *grads[5])
                bplan = triton_bwd.plan_for(u, A, B, aligned, facts=H200)
                triton_bwd.launch(dout, None, u, delta, A, B, C, D, z, bias, None, outs[2], True,
                                  *grads[:5], grads[5], plan=bplan)  # fmt: skip
    finally:
        triton_launch._Launcher._launch = saved
    return launches


def compile_sass(launch: dict) -> tuple[dict, str]:
    """(resources, SASS) of a recorded launch compiled for sm_90."""
    mod, name = launch["kernel"].rsplit(".", 1)
    jit = getattr(importlib.import_module(mod), name)
    attrs = {(i,): [["tt.divisibility", 16]] for i in launch["attrs"]}
    src = triton.compiler.ASTSource(
        fn=jit, signature=launch["sig"], constexprs=launch["const"], attrs=attrs
    )
    k = triton.compile(src, target=SM90, options=dict(launch["options"]))
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
    usage = dict(re.findall(r"(REG|STACK|SHARED|LOCAL):(\d+)", res))
    return dict(regs=usage["REG"], stack=usage["STACK"], shared=k.metadata.shared), sass


def sass_hash(sass: str) -> str:
    """A hash of the instructions alone (no addresses, no headers)."""
    ins = "\n".join(f"{op} {args}" for _, op, args in parse(sass))
    return hashlib.sha256(ins.encode()).hexdigest()[:16]


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


def loops(instrs) -> list[list]:
    """Bodies of the innermost loops (backward branches whose body holds no other backward
    branch), most MUFU.EX2 first."""
    spans = []
    for addr, op, args in instrs:
        if op.startswith("BRA"):
            m = re.search(r"0x([0-9a-f]+)", args)
            if m and int(m[1], 16) < addr:
                spans.append((int(m[1], 16), addr))
    inner = [s for s in spans if not any(s[0] <= o[0] and o[1] < s[1] for o in spans if o != s)]
    bodies = [[i for i in instrs if lo <= i[0] <= hi] for lo, hi in inner]
    return sorted(bodies, key=lambda b: -sum(op.startswith("MUFU.EX2") for _, op, _ in b))


def main_loop(instrs) -> list:
    """Instructions of the backward branch (loop) whose body has the most MUFU.EX2."""
    found = loops(instrs)
    return found[0] if found else []


def fmt(c: collections.Counter, per: float = 1.0) -> str:
    keys = ("total", "MUFU.EX2", "LDG.32", "LDG.64", "LDG.128", "STG.32", "STG.64", "STG.128")
    keys += ("LDS", "STS", "SHFL", "BAR", "LDL", "STL", "FFMA", "FMUL")
    return " ".join(f"{k}={c[k] / per:.3g}" for k in keys if c[k])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", nargs="*", default=["fp32", "bf16"])
    ap.add_argument("--shape", type=int, nargs=4, action="append", default=None)
    ap.add_argument("--bwd", action="store_true", help="the backward's launches instead")
    ap.add_argument("--dump", default=None, help="write each launch's SASS here")
    ap.add_argument("--json", default=None, help="write the report here")
    a = ap.parse_args()
    report = []
    for shape in [tuple(s) for s in a.shape] if a.shape else SHAPES:
        for dt in a.dtype:
            tag = f"{'bwd' if a.bwd else 'fwd'}-{'x'.join(map(str, shape))}-{dt}"
            for launch in capture(*shape, DTYPES[dt], a.bwd):
                name = launch["kernel"].rsplit(".", 1)[1]
                meta, sass = compile_sass(launch)
                instrs = parse(sass)
                loop = main_loop(instrs)
                digest = sass_hash(sass)
                consts = {k: v for k, v in launch["const"].items() if k.isupper()}
                print(f"{tag} {name} grid={launch['grid']} {launch['options']} regs={meta['regs']} "
                      f"stack={meta['stack']} smem={meta['shared']} sass={digest}", flush=True)  # fmt: skip
                print(f"  constexprs: {consts}")
                print(f"  kernel: {fmt(count(instrs))}")
                if loop:
                    print(f"  main loop: {fmt(count(loop))}")
                if a.dump:
                    os.makedirs(a.dump, exist_ok=True)
                    with open(os.path.join(a.dump, f"{tag}-{name}.sass"), "w") as f:
                        f.write(sass)
                report.append(dict(row=tag, kernel=name, grid=launch["grid"], sass=digest, **meta))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
