#!/bin/bash
# Twentieth session, call 4: a tile step's decays on the FMA pipe (triton_common._exp2_fma, the lane
# kernel's EMU_LOCAL / EMU_REAL step masks) instead of MUFU.EX2: does taking exponentials off the
# MUFU (at 10 instructions each) shorten the local pass, which issues fewer instructions (226 a
# tile-warp) than its MUFU cycles (34 x 8)? Each kernel's GPU time and the forward under CUDA graphs.
# Ran with experiments/twentieth_exp2_fma.patch applied (git apply; not in the library).
source benchmarks/selective_scan/device_lib.sh
cd benchmarks/selective_scan
V="base;EMU_LOCAL=128;EMU_LOCAL=136;EMU_LOCAL=170;EMU_REAL=128"
timeout 120 python3 fwd_kernel_split.py --shapes 1x1536x4096x16 --variants "$V" > $L/split.log 2>&1
grep -v Warn $L/split.log | grep -v _warn_once; el
timeout 200 python3 fwd_knob_sweep.py --rounds 3 --shapes 1x1536x4096x16,8x4096x2048x16 \
    --out $L/emu.json --variants "$V" > $L/emu.log 2>&1
grep -E " ms|FAILED|Error" $L/emu.log; el
