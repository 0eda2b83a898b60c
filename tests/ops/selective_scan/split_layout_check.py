"""Compile the "split" backward kernel for sm_90 (no GPU needed) and check the layouts of the
tensors its reduce-scatter shuffles: lane bits 2-4 must be the channel (row) bits 0-2 and lane
bits 0-1 must not touch the rows (Note [selective scan backward split]). Run as a script by
``test_triton_layouts.py``, in a process without TRITON_INTERPRET (the interpreter's kernels
cannot be compiled). Prints one line per configuration; exit status 1 if any layout is wrong."""

from __future__ import annotations

import math
import re
import sys

from ssmscan.ops.selective_scan import triton_bwd_split
from ssmscan.ops.selective_scan.plan import SPLIT_BLOCK_D, SPLIT_TT
from ssmscan.ops.selective_scan.shapes import CHECKPOINT_LEN
from ssmscan.testing.triton_sm90 import compile_sm90

ROWS = [(1,), (2,), (4,)]  # lane bits 2, 3, 4 -> row bits 0, 1, 2


def compile_ttgir(dtype: str, full: bool, seg: bool, **ints: int) -> str:
    kernel = triton_bwd_split._selective_scan_bwd_split_kernel
    io = {"dout", "u", "delta", "z", "du", "ddelta", "dz"}
    values: dict[str, object] = {}
    for name in kernel.arg_names:
        values[name] = f"*{dtype}" if name in io else "*fp32"
    values.update(
        dim=4096,
        L=2048,
        G=1,
        NCK=9,
        SEG=8,
        SOFTPLUS=full,
        NP=16,
        CK=CHECKPOINT_LEN,
        BLOCK_D=SPLIT_BLOCK_D,
        HAS_D=full,
        HAS_Z=full,
        HAS_BIAS=full,
        HAS_DLAST=seg,
        HAS_SEG=seg,
        TT=SPLIT_TT,
        EMU=False,
        PTX=True,
    )
    values.update(ints)
    return compile_sm90(kernel, values, 1).asm["ttgir"]


def lane_bases(definition: str) -> list[tuple[int, ...]]:
    """The row / column offset each lane bit adds, from a #ttg.linear or #ttg.blocked layout."""
    m = re.search(r"lane = \[(.*?)\], warp", definition)
    if "#ttg.linear" in definition and m:
        return [tuple(int(x) for x in b.split(",")) for b in re.findall(r"\[([^\[\]]*)\]", m[1])]
    nums = {
        k: [int(x) for x in re.search(rf"{k} = \[([^\]]*)\]", definition)[1].split(",")]
        for k in ("sizePerThread", "threadsPerWarp", "order")
    }
    bases = []
    for d in nums["order"]:  # fastest dimension first
        for k in range(int(math.log2(nums["threadsPerWarp"][d]))):
            b = [0] * len(nums["order"])
            b[d] = nums["sizePerThread"][d] << k
            bases.append(tuple(b))
    return bases


def check(ttgir: str) -> list[str]:
    aliases = dict(re.findall(r"^(#\w+) = (.*)$", ttgir, flags=re.M))
    problems, seen = [], 0
    for line in ttgir.splitlines():
        if "shfl.sync.bfly" not in line:
            continue
        seen += 1
        layout = re.search(r"tensor<[^,>]*, (#\w+)>", line)[1]
        bases = lane_bases(aliases[layout])
        rows = [b[:1] for b in bases[2:5]]
        low = [b[0] for b in bases[:2]]
        if rows != ROWS or any(low):
            problems.append(f"{layout}: lane bases {bases}")
    if not seen:
        problems.append("no shfl.sync.bfly found")
    return sorted(set(problems))


# (dtype, real configuration, segments + dlast, int arguments other than the defaults): the
# dtypes, both flag sets, and the int specializations that change the code (SEG == 1 and G == 1
# become constants; G = 2 not)
CONFIGS = [
    (dtype, full, seg, {}) for dtype in ("fp32", "bf16", "fp16") for full, seg in ((1, 0), (0, 1))
] + [("fp32", True, True, dict(SEG=1)), ("bf16", True, False, dict(G=2, NCK=16, SEG=16))]


def main() -> int:
    bad = 0
    for dtype, full, seg, ints in CONFIGS:
        problems = check(compile_ttgir(dtype, bool(full), bool(seg), **ints))
        tag = f"{dtype} full={bool(full)} seg={bool(seg)} {ints}"
        print(tag, "ok" if not problems else problems, flush=True)
        bad += bool(problems)
    # the negative control: with L not a multiple of 16 the layouts differ (``applies`` refuses
    # such L on the GPU); if this ever passes, the check no longer sees the layouts
    if not check(compile_ttgir("fp32", True, False, L=2040)):
        print("negative control (L = 2040) passed: the check is blind", flush=True)
        bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
