"""Compile the lane forward kernel (Note [selective scan forward lanes]) for sm_90 (no GPU
needed) and check the layout of every tensor its ``shfl.sync.idx`` broadcasts read
(``layout_check.lane_layout_problem``), over the specializations the launcher can produce:
every dtype, each lane geometry (NP 8, 16, 32), L and pointers with and without 16-divisibility,
the local pass of a split L, grouped B / C; and the split backward's lane states kernel (with
and without the segments' local pass). Run as a script by
``test_triton_fwd_lane.py``, in a process without TRITON_INTERPRET. Prints one line per
configuration; exit status 1 if any is wrong or a check's negative control passes, 3 (``BLIND``)
if only the lane check's control (NP = 64 in bf16, which the launcher does not send to this
kernel) passes."""

from __future__ import annotations

import inspect
import sys
from typing import Any

from ssmscan.ops.selective_scan import (
    layout_check,
    triton_bwd_lane,
    triton_bwd_split,
    triton_fwd_lane,
    triton_fwd_lane2,
)
from ssmscan.ops.selective_scan.plan import fwd_block_channels, lane_geometry, padded_steps
from ssmscan.ops.selective_scan.shapes import CHECKPOINT_LEN, num_checkpoints
from ssmscan.testing.triton_sm90 import compile_sm90

IO = {"u", "delta", "z", "out", "dout"}
# exit status when every configuration is right but the NP = 64 control lays out right too (Triton
# 3.8 does; 3.6, the GPU machine's, does not): the lane check's sensitivity is not shown there
BLIND = 3


def pointers(kernel, dtype: str, io: set[str]) -> dict[str, object]:
    """A pointer type for every parameter but the constexprs with defaults (``compile_sm90``
    takes those as the JIT does): the tensors of ``io`` of ``dtype``, the others fp32."""
    return {
        p.name: (f"*{dtype}" if p.name in io else "*fp32")
        for p in kernel.params
        if not (p.is_constexpr and p.default is not inspect.Parameter.empty)
    }


KERNELS = {
    "fwd": triton_fwd_lane._selective_scan_fwd_lane_kernel,
    # the split backward's lane states kernel (with ADJ: and the segments' local pass)
    "states": triton_bwd_lane._selective_scan_bwd_lane_states_kernel,
    # the forward's real pass with two channels a thread
    "fwd2": triton_fwd_lane2._selective_scan_fwd_lane2_kernel,
}


def compile_ttgir(
    dtype: str, NP: int, L: int, aligned: bool, local: bool, G: int, which: str = "fwd", **extra
) -> str:
    """TTGIR of the lane forward kernel (``which``: or another kernel of ``KERNELS``); ``extra``
    overrides constexprs."""
    return compile_lane(dtype, NP, L, aligned, local, G, which, **extra).asm["ttgir"]


def compile_lane(
    dtype: str, NP: int, L: int, aligned: bool, local: bool, G: int, which: str = "fwd", **extra
) -> Any:
    """The lane forward kernel (``which``: or another kernel of ``KERNELS``) compiled for sm_90."""
    kernel = KERNELS[which]
    KL, TPL = lane_geometry(NP)
    dim = 256
    block_d, warps = fwd_block_channels(dim, G, NP, KL)
    values = pointers(kernel, dtype, IO)
    values.update(
        dim=dim,
        L=L,
        LP=padded_steps(L, KL * TPL),
        N=NP,
        G=G,
        NCK=num_checkpoints(L),
        NC=num_checkpoints(L) - 1,
        SEG=3,
        SOFTPLUS=True,
        NP=NP,
        CK=CHECKPOINT_LEN,
        BLOCK_D=block_d,
        KL=KL,
        TPL=TPL,
        HAS_D=True,
        HAS_Z=True,
        HAS_BIAS=True,
        HAS_INIT=False,
        LOCAL=local,
        SPLIT=True,
        A_RAW=True,
        HAS_LAST=True,
        PTX=True,  # sm_90: the plans' inline PTX
        ADJ=local,  # the states kernel's: ``local`` there is the fused local pass
        # the forward's options as the planner sets them
        Y_SCATTER=True,
        BC_ROLL=True,
        BCAST_TILE=dtype != "fp32",
    )
    values.update(extra)
    # (the other kernels take subsets of the values)
    unaligned = () if aligned else IO
    return compile_sm90(kernel, values, warps, unaligned)


# (dtype, NP, L, aligned tensors, LOCAL (the states kernel: ADJ), G[, the kernel: KERNELS[,
# constexprs]])
CONFIGS = [
    ("fp32", 16, 2048, True, True, 1, "states"),
    ("bf16", 16, 1000, False, True, 1, "states"),
    ("bf16", 16, 4096, True, False, 2, "states"),
    ("fp32", 16, 2048, True, False, 1),
    ("bf16", 16, 2048, True, False, 1),
    ("fp16", 16, 2048, True, True, 1),
    ("fp32", 16, 2047, True, False, 1),
    ("bf16", 16, 2047, False, False, 1),
    ("fp32", 16, 2048, False, True, 1),
    ("bf16", 16, 2048, True, False, 2),
    ("fp32", 8, 63, True, False, 1),
    ("bf16", 8, 2048, False, False, 1),
    ("fp32", 32, 1000, True, False, 1),
    ("bf16", 32, 1001, False, True, 1),
    ("fp32", 16, 2048, True, False, 1, "fwd2"),
    ("bf16", 16, 2047, False, False, 1, "fwd2"),
    ("bf16", 16, 4096, True, False, 2, "fwd2"),
    # the loop without masks, 32-bit row offsets (``EVEN`` / ``I32``)
    ("bf16", 16, 4096, True, False, 1, "fwd2", dict(EVEN=True, I32=True, AHEAD=2)),
    ("fp32", 16, 4096, True, False, 1, "fwd2", dict(EVEN=True, I32=True, AHEAD=2)),
    ("bf16", 16, 4096, True, True, 1, "fwd", dict(EVEN=True, I32=True, AHEAD=2, SEG_T=True)),
    ("fp16", 16, 2048, True, False, 1, "fwd", dict(EVEN=True, I32=True, AHEAD=2)),
]


def compile_bwd_ttgir(dtype: str, full: bool, seg: bool, lane: bool = True, **ints: int) -> str:
    """TTGIR of the lane backward main kernel (``lane``; else the split kernel, the butterfly
    check's negative control) at the benchmark's specialization (L = 2048, aligned)."""
    return compile_bwd(dtype, full, seg, lane, **ints).asm["ttgir"]


def compile_bwd(dtype: str, full: bool, seg: bool, lane: bool = True, **ints: int) -> Any:
    """``compile_bwd_ttgir``'s kernel compiled for sm_90; an eager launch's unless ``ints`` say
    otherwise (``PREFETCH_BC=False``: a traced one's)."""
    kernel = (
        triton_bwd_lane._selective_scan_bwd_lane_kernel
        if lane
        else triton_bwd_split._selective_scan_bwd_split_kernel
    )
    io = {"dout", "u", "delta", "z", "du", "ddelta", "dz"}
    values = pointers(kernel, dtype, io)
    values.update(
        dim=4096,
        L=2048,
        LP=padded_steps(2048, 8),
        G=1,
        NCK=9,
        SEG=8,
        SOFTPLUS=full,
        NP=16,
        CK=CHECKPOINT_LEN,
        BLOCK_D=8,
        KL=4,
        TPL=2,
        TT=8,
        HAS_D=full,
        HAS_Z=full,
        HAS_BIAS=full,
        HAS_DLAST=seg,
        HAS_SEG=seg,
        EMU=False,
        PTX=True,
    )
    if lane:  # segments come with the lane local pass: the main kernel carries them itself
        values["CARRY"] = seg
        values["PREFETCH_BC"] = True  # an eager launch's
    values.update(ints)
    return compile_sm90(kernel, values, 1)


def impure_asm(ttir: str) -> list[str]:
    """The inline asm ops of a TTIR module not marked pure: where torch's mutation analysis of a
    traced launch gives up (Note [traced kernels' inline asm])."""
    return [
        line.strip()[:120]
        for line in ttir.splitlines()
        if "tt.elementwise_inline_asm" in line and "pure = true" not in line
    ]


# the lane backward (dtype, real configuration, segments + dlast, ints): the split kernel's set
BWD_CONFIGS = [
    (dtype, full, seg, {}) for dtype in ("fp32", "bf16", "fp16") for full, seg in ((1, 0), (0, 1))
] + [("fp32", True, True, dict(SEG=1)), ("bf16", True, False, dict(G=2, NCK=16, SEG=16))]


def bwd_problem(ttgir: str) -> str | None:
    return layout_check.lane_layout_problem(ttgir, 4) or layout_check.bfly_layout_problem(ttgir)


def main() -> int:
    bad = 0
    impure: list[str] = []  # the traced kernels' non-pure inline asm (a traced launch's kernels)
    for cfg in CONFIGS:
        KL, _ = lane_geometry(cfg[1])
        compiled = compile_lane(*cfg[:7], **(cfg[7] if len(cfg) > 7 else {}))
        impure += impure_asm(compiled.asm["ttir"])
        # the forward's butterflies too (``_y_scatter``: 16 states), as its launcher checks
        fwd = len(cfg) < 7 or cfg[6] in ("fwd", "fwd2")
        problem = layout_check.lane_layout_problem(compiled.asm["ttgir"], KL, bfly=fwd)
        print(cfg, "ok" if problem is None else problem, flush=True)
        bad += problem is not None
    # the backward main kernel as a traced launch compiles it (two configurations)
    for dtype, full, seg in (("fp32", True, True), ("bf16", True, False)):
        compiled = compile_bwd(dtype, full, seg, PREFETCH_BC=False)
        impure += impure_asm(compiled.asm["ttir"])
        problem = bwd_problem(compiled.asm["ttgir"])
        print("traced bwd", dtype, f"full={full} seg={seg}", problem or "ok", flush=True)
        bad += problem is not None
    print("traced kernels' inline asm all pure:", "ok" if not impure else impure, flush=True)
    bad += bool(impure)
    if not impure_asm(compile_bwd("fp32", True, False, PREFETCH_BC=True).asm["ttir"]):
        print("negative control (the eager main kernel's L1 prefetch) not found: the purity "
              "check is blind", flush=True)  # fmt: skip
        bad += 1
    for dtype, full, seg, ints in BWD_CONFIGS:
        problem = bwd_problem(compile_bwd_ttgir(dtype, bool(full), bool(seg), **ints))
        print(
            "bwd",
            dtype,
            f"full={bool(full)} seg={bool(seg)} {ints}",
            "ok" if problem is None else problem,
            flush=True,
        )
        bad += problem is not None
    if layout_check.bfly_layout_problem(compile_bwd_ttgir("fp32", True, False, lane=False)) is None:
        print(
            "negative control (the split kernel's butterflies) passed: the check is blind",
            flush=True,
        )
        bad += 1
    # (with a shuffle per step: the one-asm broadcasts of 16-bit inputs, ``BCAST_TILE``, get
    # their operands laid out right even there, so they make no control)
    KL, _ = lane_geometry(64)
    bad_ttgir = compile_ttgir("bf16", 64, 1000, True, False, 1, BCAST_TILE=False)
    blind = layout_check.lane_layout_problem(bad_ttgir, KL) is None
    if blind:
        print("negative control (NP = 64, bf16) passed: the check is blind", flush=True)
    if bad:
        return 1
    return BLIND if blind else 0


if __name__ == "__main__":
    sys.exit(main())
