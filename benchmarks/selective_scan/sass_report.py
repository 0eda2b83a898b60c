"""Offline sm_90 resource / SASS report of the Triton selective-scan kernels (no GPU needed).

Compiles ``_selective_scan_fwd_kernel`` (or, with ``--bwd``, the backward main kernel of each
``triton_bwd.BWD_VARIANT``) for an H100/H200 target (``GPUTarget("cuda", 90, 32)``)
with the benchmark shapes' specialization (pointers and ints divisible by 16 marked as Triton's JIT
would), real configuration (z, D, delta_bias, softplus), the BLOCK_D / num_warps that
``triton_fwd.fwd_block_channels`` (``triton_bwd.bwd_block_channels``) picks, then disassembles the cubin with the ``cuobjdump`` that
ships with Triton and prints registers, spills, shared memory and instruction counts: for the
whole kernel and per time step of the main loop (the backward branch spanning the most MUFU.EX2;
its count divided by the steps per iteration). For the backward the two loops with the most
MUFU.EX2 are reported: the reverse tile loop ("rev": recompute + adjoint + gradients) and the chunk
pass ("chunk": tile-start states into the scratch), each per time step (4 steps per iteration).

    python benchmarks/selective_scan/sass_report.py [--local] [--ch2] [--dump DIR]
    python benchmarks/selective_scan/sass_report.py --bwd [--variant tile tile_rs]
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import tempfile

import torch
import triton

from ssmscan.ops.selective_scan import (
    triton_bwd,
    triton_bwd_split,
    triton_common,
    triton_fwd,
    triton_fwd_lane2,
)
from ssmscan.ops.selective_scan.shapes import CHECKPOINT_LEN, num_checkpoints
from ssmscan.testing.triton_sm90 import compile_sm90

SHAPES = [(8, 4096, 2048, 16), (16, 1536, 1024, 16), (1, 1536, 4096, 16), (1, 1024, 65536, 16)]
DTYPES = {"fp32": "fp32", "bf16": "bf16", "fp16": "fp16"}
_BC_PTR = {"bf16": "*i32", "fp16": "*fp16"}  # 16-bit rows (``--bc16``): bf16 pairs as int32 words
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


def fwd_values(
    batch: int, dim: int, L: int, N: int, dt: str, local: bool, bc16: bool = False
) -> tuple[dict, int]:
    NP = triton_common.pad_states(N)
    lane = triton_fwd.FWD_VARIANT == "lane"
    kl, tpl = triton_fwd.lane_geometry(NP)
    block_d, warps = triton_fwd.fwd_block_channels(batch, dim, 1, NP, kl if lane else None)
    NCK = num_checkpoints(L)
    nseg, seg = triton_common.segments(
        batch * triton.cdiv(dim, block_d) * warps, NCK - 1, triton_common.FWD_TARGET_WARPS
    )
    v = dict(
        u=f"*{dt}",
        delta=f"*{dt}",
        A2="*fp32",
        Bt=_BC_PTR[dt] if bc16 else "*fp32",
        Ct=_BC_PTR[dt] if bc16 else "*fp32",
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
    if lane and bc16:
        v["BC16"] = 1 if dt == "bf16" else 2
    if lane:  # the lane kernel's signature (``triton_fwd_lane``)
        v.update(LP=triton_fwd.padded_steps(L, kl * tpl), KL=kl, TPL=tpl, A_RAW=True, HAS_LAST=True,
                 Y_SCATTER=triton_fwd.LANE_Y_SCATTER, AHEAD=triton_fwd.LANE_AHEAD,
                 BC_ROLL=triton_fwd.LANE_BC_ROLL and triton_fwd.LANE_AHEAD == 1,
                 BCAST_TILE=triton_fwd.bcast_tile(torch.float32 if dt == "fp32" else torch.bfloat16))  # fmt: skip
        v["last"] = "*fp32"
        v["TT"] = kl * tpl
    else:
        v["TT"] = triton_fwd.steps_per_tile(NP)
    v["SPLIT"] = nseg > 1
    return v, warps, nseg


def bwd_values(batch: int, dim: int, L: int, N: int, dt: str) -> tuple[dict, int, int]:
    """Arguments of the backward main kernel as ``triton_bwd.launch`` passes them (the "split"
    variant's where ``triton_bwd_split.applies``)."""
    NP = triton_common.pad_states(N)
    NCK = num_checkpoints(L)
    split = triton_bwd.BWD_VARIANT in ("split", "lane")
    if split:
        block_d, warps = triton_bwd_split.SPLIT_BLOCK_D, 1
        nseg, seg = triton_common.segments(
            batch * triton.cdiv(dim, block_d), NCK - 1, triton_common.FWD_TARGET_WARPS
        )
    else:
        block_d, warps = triton_bwd.bwd_block_channels(batch, dim, 1)
        nseg, seg = triton_common.segments(batch * triton.cdiv(dim, block_d) * warps, NCK - 1)
    v = dict(
        dout=f"*{dt}",
        dlast="*fp32",
        u=f"*{dt}",
        delta=f"*{dt}",
        A2t="*fp32",
        Bt="*fp32",
        Ct="*fp32",
        Dv="*fp32",
        z=f"*{dt}",
        delta_bias="*fp32",
        ckpt="*fp32",
        seg_adj="*fp32",
        scratch="*fp32",
        du=f"*{dt}",
        ddelta=f"*{dt}",
        dz=f"*{dt}",
        dAp="*fp32",
        dBp="*fp32",
        dCp="*fp32",
        dDp="*fp32",
        dbiasp="*fp32",
        dinit="*fp32",
        dim=dim,
        L=L,
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
        HAS_DLAST=False,
        HAS_SEG=nseg > 1,
    )
    if split:  # (dim, NP) A2 instead of (NP, dim) A2t; TT and EMU instead of RS; the tile states
        v = {("A2" if k == "A2t" else k): x for k, x in v.items() if k not in ("ckpt", "scratch")}
        v.update(tstates="*fp32", TT=triton_bwd_split.SPLIT_TT, EMU=False)
        if triton_bwd.BWD_VARIANT == "lane":  # Note [selective scan backward lanes]
            # the lane local pass runs where L is in segments: the main kernel carries
            v.update(LP=triton_fwd.padded_steps(L, 8), KL=4, TPL=2, seg_dt="*fp32",
                     CARRY=nseg > 1)  # fmt: skip
        return v, warps, nseg
    kernel = triton_bwd.BWD_VARIANTS[triton_bwd.BWD_VARIANT]
    v.update(triton_bwd.variant_constexprs(kernel, True, block_d, warps))
    return v, warps, nseg


def states_values(
    batch: int, dim: int, L: int, N: int, dt: str, adj: bool = False
) -> tuple[dict, int]:
    """Arguments of the split backward's states kernel as ``triton_bwd.launch`` passes them
    (``adj``: the lane kernel with the segments' local pass, ``ADJ``)."""
    NP = triton_common.pad_states(N)
    kl, tpl = triton_fwd.lane_geometry(NP)
    lane = triton_fwd.FWD_VARIANT == "lane"
    block_d, warps = triton_fwd.fwd_block_channels(batch, dim, 1, NP, kl if lane else None)
    v = dict(
        u=f"*{dt}",
        delta=f"*{dt}",
        A2="*fp32",
        Bt="*fp32",
        delta_bias="*fp32",
        ckpt="*fp32",
        tstates="*fp32",
        LP=triton_fwd.padded_steps(L, kl * tpl),
        KL=kl,
        TPL=tpl,
        dim=dim,
        L=L,
        G=1,
        NCK=num_checkpoints(L),
        SOFTPLUS=True,
        NP=NP,
        CK=CHECKPOINT_LEN,
        BLOCK_D=block_d,
        HAS_BIAS=True,
        TT=triton_bwd_split.SPLIT_TT,
        dout=f"*{dt}" if adj else None,
        z=f"*{dt}" if adj else None,
        Ct="*fp32" if adj else None,
        seg_loc="*fp32" if adj else None,
        seg_dt="*fp32" if adj else None,
        SEG=4,
        HAS_Z=adj,
        ADJ=adj,
        BCAST_TILE=triton_fwd.bcast_tile(torch.float32 if dt == "fp32" else torch.bfloat16),
    )
    return v, warps


def sass_of(
    kernel, values: dict, warps: int, dump: str | None, tag: str, maxnreg: int | None = None
) -> tuple[dict, str]:
    k = compile_sm90(kernel, values, warps, maxnreg=maxnreg)
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
    ap.add_argument(
        "--variant", nargs="*", default=None, help="BWD_VARIANT values (--bwd; default: all)"
    )
    ap.add_argument("--dtype", nargs="*", default=list(DTYPES))
    ap.add_argument("--shape", type=int, nargs=4, action="append", default=None)
    ap.add_argument("--local", action="store_true", help="also the LOCAL pass (L split)")
    ap.add_argument("--dump", default=None, help="write ttgir / ptx / sass here")
    ap.add_argument("--bwd", action="store_true", help="the backward main kernel instead")
    ap.add_argument(
        "--ch2",
        action="store_true",
        help="the lane forward's real pass with two channels a thread (triton_fwd_lane2); "
        "per step counts are then per channel-step",
    )
    ap.add_argument(
        "--bc16",
        action="store_true",
        help="the lane forward's B / C rows in the inputs' 16-bit dtype (triton_fwd.bc_rows_dtype)",
    )
    ap.add_argument("--fwd-variant", default=triton_fwd.FWD_VARIANT, help="triton_fwd.FWD_VARIANT")
    ap.add_argument(
        "--const",
        nargs="*",
        default=[],
        help="extra constexprs of the main kernel, NAME=INT (e.g. PREFETCH=0 for --variant lane)",
    )
    ap.add_argument("--maxnreg", type=int, default=None, help="a register cap (launch option)")
    a = ap.parse_args()
    a.const = {k: int(x) for k, x in (c.split("=") for c in a.const)}
    triton_fwd.FWD_VARIANT = a.fwd_variant  # also the split backward's states kernel
    if a.bwd:
        bwd_main(a)
        return
    shapes = [tuple(s) for s in a.shape] if a.shape else SHAPES
    for shape in shapes:
        for dt in a.dtype:
            for local in (False, True) if a.local else (False,):
                v, warps, nseg = fwd_values(*shape, DTYPES[dt], local, a.bc16 and dt != "fp32")
                if triton_fwd.FWD_VARIANT == "lane":  # the launcher's unroll (FWD_UNROLL)
                    v["UNROLL"] = triton_fwd.FWD_UNROLL[1 if local else 0]
                v.update(a.const)
                tag = f"fwd-{'x'.join(map(str, shape))}-{dt}{'-local' if local else ''}"
                steps = v["TT"] * v.get("UNROLL", 1)
                if a.ch2 and not local and triton_fwd.FWD_VARIANT == "lane":
                    # its signature: no unroll / loads options, segments of tiles where split
                    if v["SPLIT"]:  # SEG in tiles, as the launcher sets it (not checkpoint chunks)
                        v["SEG"] = triton.cdiv(triton.cdiv(shape[2], v["TT"]), nseg)
                    for k in ("UNROLL", "Y_SCATTER", "BC_ROLL", "LOCAL", "TT"):
                        v.pop(k, None)
                    v["SEG_T"] = v["SPLIT"]
                    kernel = triton_fwd_lane2._selective_scan_fwd_lane2_kernel
                    tag += "-ch2"
                    steps = 2 * v["KL"] * v["TPL"]  # a tile of two channels a thread
                elif triton_fwd.FWD_VARIANT == "lane":
                    kernel = triton_fwd._selective_scan_fwd_lane_kernel
                else:
                    kernel = triton_fwd._selective_scan_fwd_kernel
                meta, sass = sass_of(kernel, v, warps, a.dump, tag, a.maxnreg)
                instrs = parse(sass)
                loop = main_loop(instrs)
                print(
                    f"{tag}: BLOCK_D={v['BLOCK_D']} warps={warps} NSEG={nseg} "
                    f"regs={meta['regs']} stack={meta['stack']} local={meta['local']} smem={meta['shared']}"
                )
                print(f"  kernel: {fmt(count(instrs))}")
                print(f"  per step ({steps} steps/iter): {fmt(count(loop), steps)}")


def bwd_main(a) -> None:
    variants = a.variant or list(triton_bwd.BWD_VARIANTS)
    shapes = [tuple(s) for s in a.shape] if a.shape else SHAPES
    old = triton_bwd.BWD_VARIANT
    for var in variants:
        triton_bwd.BWD_VARIANT = var
        kernel = triton_bwd.BWD_VARIANTS[var]
        for shape in shapes:
            for dt in a.dtype:
                v, warps, nseg = bwd_values(*shape, DTYPES[dt])
                v.update(a.const)
                tag = f"bwd-{var}-{'x'.join(map(str, shape))}-{dt}"
                meta, sass = sass_of(kernel, v, warps, a.dump, tag)
                instrs = parse(sass)
                print(
                    f"{tag}: BLOCK_D={v['BLOCK_D']} warps={warps} NSEG={nseg} "
                    f"regs={meta['regs']} stack={meta['stack']} local={meta['local']} smem={meta['shared']}"
                )
                print(f"  kernel: {fmt(count(instrs))}")
                tt = triton_bwd_split.SPLIT_TT if var in ("split", "lane") else 4
                for name, body in zip(("rev", "chunk"), loops(instrs)):
                    print(f"  {name} per step ({tt} steps/iter): {fmt(count(body), tt)}")
                if var in ("split", "lane"):  # the chunk pass is its own kernel
                    lane = triton_fwd.FWD_VARIANT == "lane"
                    # the lane one also with the segments' local pass (ADJ)
                    for adj in (False, True) if lane else (False,):
                        sv, sw = states_values(*shape, DTYPES[dt], adj)
                        meta, sass = sass_of(
                            triton_bwd._selective_scan_bwd_lane_states_kernel
                            if lane
                            else triton_bwd_split._selective_scan_bwd_states_kernel,
                            sv,
                            sw,
                            a.dump,
                            tag + ("-states-adj" if adj else "-states"),
                        )
                        body = main_loop(parse(sass))
                        print(
                            f"  states kernel{' ADJ' if adj else ''}: BLOCK_D={sv['BLOCK_D']} "
                            f"warps={sw} regs={meta['regs']} stack={meta['stack']}; per step: "
                            f"{fmt(count(body), sv['TT'])}"
                        )
    triton_bwd.BWD_VARIANT = old


if __name__ == "__main__":
    main()
