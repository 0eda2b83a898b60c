#!/bin/bash
# Twenty-sixth session, call 3 (with experiments/twentysixth_seg0_side.patch applied): segment 0's real pass on a side stream beside the local pass
# (LANE_SEG0_SIDE; the other segments' real pass after it), at the library's segments and at
# others, timed beside the library's forward under CUDA graphs, every variant checked first.
source benchmarks/selective_scan/device_lib.sh
cd benchmarks/selective_scan
S="triton_fwd.LANE_SEG0_SIDE=1"
V="base;$S;$S,triton_fwd.LANE_SEGMENTS=8;$S,triton_fwd.LANE_SEGMENTS=12;$S,triton_fwd.LANE_SEGMENTS=16"
V="$V;$S,triton_fwd.LANE_SEGMENTS=22;triton_fwd.LANE_SEGMENTS=16;triton_fwd.LANE_SEGMENTS=22"
timeout 200 python3 fwd_knob_sweep.py --rounds 3 --shapes 1x1536x4096x16 --dtypes bf16,fp32 \
    --variants "$V" 2>&1 | tee $L/sweep.log | grep -E " ms|Error|rror"
el
timeout 120 python3 fwd_knob_sweep.py --rounds 3 --shapes 1x1024x65536x16,16x1536x1024x16 --dtypes bf16 \
    --variants "base;$S" 2>&1 | tee $L/sweep2.log | grep -E " ms|Error|rror"
el
