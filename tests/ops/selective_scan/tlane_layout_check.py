"""Compile the time-lane forward kernels (Note [selective scan forward time lanes]) for sm_90 (no
GPU needed) over the specializations their launcher can produce (every dtype, L and pointers with
and without 16-divisibility, the optional inputs on and off, 16-bit rows, two channels a warp)
and check every shuffle operand's layout (``triton_fwd_tlane.tlane_layout_problem``), no spills
and no shared memory at one warp a channel (at ``W`` = 2 the warps' maps pass through it). Run
as a script by ``test_triton_fwd_tlane.py``, in a process without TRITON_INTERPRET.
Prints one "... ok" line per configuration with the registers; exit status 1 on any problem."""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
import tempfile

import triton

from ssmscan.ops.selective_scan import triton_fwd_tchain, triton_fwd_tlane
from ssmscan.ops.selective_scan.shapes import CHECKPOINT_LEN, num_checkpoints
from ssmscan.testing.triton_sm90 import compile_sm90

CUOBJDUMP = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")


def usage(cubin: bytes) -> dict[str, int]:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        res = subprocess.run(
            [CUOBJDUMP, "-res-usage", path], capture_output=True, text=True, check=True
        ).stdout
    return {k: int(v) for k, v in re.findall(r"(REG|STACK|LOCAL):(\d+)", res)}


def main() -> int:
    bad = 0
    configs = list(
        itertools.product(
            ("bf16", "fp32", "fp16"), (4096, 1001), (True, False), (True, False), (1,), (0,), (1,)
        )
    )  # (grouped B / C changes offsets only, not layouts: G = 2 ran the same, 2026-12-01)
    # the other places of the B / C loads (``BC_MODE``), bf16 and fp32 with every optional input
    configs += [(dt, 4096, True, True, 1, m, 1) for dt in ("bf16", "fp32") for m in (1, 2)]
    # 2 warps a channel (``W``)
    configs += [(dt, L, L == 4096, True, 1, 0, 2) for dt in ("bf16", "fp32") for L in (4096, 1001)]
    configs += [("bf16", 4096, True, True, 1, bc, 2) for bc in (1, 2)]
    configs = [(*c, 0) for c in configs]
    # 16-bit B / C rows (``BC16``: bf16 pairs as int32 words, fp16), where they load
    configs += [("bf16", L, L == 4096, True, 1, bc, 1, 1) for L in (4096, 1001) for bc in (0, 2)]
    configs += [("fp16", 4096, True, True, 1, 0, 1, 2), ("bf16", 4096, True, True, 1, 1, 2, 1)]
    # two channels a warp (``_selective_scan_fwd_tlane2_kernel``; W = 1, BC_MODE 1 / 2); W = 0 tags it
    configs += [("bf16", 4096, True, True, 1, 2, 0, 1), ("fp32", 1001, False, True, 1, 2, 0, 0),
                ("fp16", 4096, True, False, 1, 1, 0, 2)]  # fmt: skip
    # the chained tiles (``triton_fwd_tchain``; a (channel, tile) a one-warp program); W = -1 tags it
    configs += [("bf16", 4096, True, True, 1, 0, -1, 1), ("fp32", 1001, False, False, 2, 0, -1, 0),
                ("fp16", 4096, True, True, 1, 0, -1, 2)]  # fmt: skip
    for dt, L, aligned, opt, G, bc, W, bc16 in configs:
        io = f"*{dt}"
        rows = {0: "*fp32", 1: "*i32", 2: "*fp16"}[bc16]
        vals = dict(
            u=io, delta=io, A2="*fp32", Bt=rows, Ct=rows, Dv="*fp32", z=io,
            delta_bias="*fp32", init="*fp32", out=io, ckpt="*fp32", last="*fp32", xchg="*fp32", dim=1536,
            L=L, LP=triton_fwd_tlane.tile_steps(L, max(W, 1)), G=G, NCK=num_checkpoints(L),
            SOFTPLUS=opt, NP=16, CK=CHECKPOINT_LEN, HAS_D=opt, HAS_Z=opt, HAS_BIAS=opt,
            HAS_INIT=not opt, A_RAW=dt != "fp32", PREFETCH_L1=opt, BC_MODE=bc, W=W, BC16=bc16,
            flags="*i32", maps="*fp32", ends="*fp32", T=(L + 63) // 64,
        )  # fmt: skip
        unaligned = () if aligned else ("u", "delta", "z", "out")
        if W == -1:
            kernel, warps = triton_fwd_tchain._selective_scan_fwd_tchain_kernel, 1
        elif W == 0:
            kernel, warps = triton_fwd_tlane._selective_scan_fwd_tlane2_kernel, 1
        else:
            kernel, warps = triton_fwd_tlane._selective_scan_fwd_tlane_kernel, W
        k = compile_sm90(kernel, vals, warps, unaligned)
        problem = triton_fwd_tlane.tlane_layout_problem(k.asm["ttgir"])
        res = usage(k.asm["cubin"])
        # shared memory only for the warps' maps at W = 2 (W = 0: the two-channel kernel)
        if res.get("LOCAL", 0) or (k.metadata.shared and W != 2):  # (W = -1: the chain kernel)
            problem = problem or f"spills ({res}) or shared memory ({k.metadata.shared})"
        tag = f"{dt} L={L} aligned={aligned} optional={opt} G={G} bc={bc} W={W} bc16={bc16}"
        if problem is None:
            print(f"{tag} regs={res['REG']} ok")
        else:
            print(f"{tag}: {problem}")
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    if os.environ.get("TRITON_INTERPRET") == "1":
        sys.exit("run without TRITON_INTERPRET=1: this compiles for sm_90")
    sys.exit(main())
