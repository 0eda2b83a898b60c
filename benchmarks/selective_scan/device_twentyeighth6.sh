#!/bin/bash
# Twenty-eighth session, call 6: the missed row with 16-bit B / C rows (LANE_BC16 = 1) and the
# fold loading at most 4 segments at a time (LANE_FOLD_GROUP 4 / 0): sm_90 compiles the
# two-channel real pass to 128 registers then (159 with groups of 8), 8 programs a multiprocessor,
# so the planner gives it 22 segments (one wave) instead of 16; the kernels apart, then the
# forward against the library's.
source benchmarks/selective_scan/device_lib.sh
cd benchmarks/selective_scan
B=triton_fwd.LANE_BC16=1; G=triton_fwd.LANE_FOLD_GROUP
V="base;$B,$G=4;$B,$G=0;$B,$G=4,triton_fwd.LANE_LOCAL_FINE=1;$B,$G=4,triton_fwd.LANE_SEGMENTS=16;$G=4"
timeout 150 python3 fwd_kernel_split.py --graph --shapes 1x1536x4096x16 --dtypes bf16 \
    --variants "$V" > $L/split.log 2>&1; grep -vE "^\s*$|Warn|warn" $L/split.log | tail -40
el
timeout 200 python3 fwd_knob_sweep.py --rounds 5 --shapes 1x1536x4096x16 --dtypes bf16 \
    --variants "$V" 2>&1 | tee $L/sweep.log | grep -E " ms|Error|rror"
el
