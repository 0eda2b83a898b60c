#!/bin/bash
# Twenty-eighth session, call 7: call 6 again with the segments the 128-register real pass would
# fill one wave with (its planner kept 16: 768 programs are under one wave of 1056 either way):
# 16-bit rows, folds of 4, LANE_SEGMENTS 20 / 22 / 24.
source benchmarks/selective_scan/device_lib.sh
cd benchmarks/selective_scan
B=triton_fwd.LANE_BC16=1; G=triton_fwd.LANE_FOLD_GROUP; S=triton_fwd.LANE_SEGMENTS
V="base;$B,$G=4,$S=22;$B,$G=4,$S=20;$B,$G=4,$S=24;$B,$G=4,$S=22,triton_fwd.LANE_LOCAL_FINE=1"
timeout 150 python3 fwd_kernel_split.py --graph --shapes 1x1536x4096x16 --dtypes bf16 \
    --variants "$V" > $L/split.log 2>&1; grep -vE "^\s*$|Warn|warn" $L/split.log | tail -40
el
timeout 150 python3 fwd_knob_sweep.py --rounds 5 --shapes 1x1536x4096x16 --dtypes bf16 \
    --variants "$V" 2>&1 | tee $L/sweep.log | grep -E " ms|Error|rror"
el
