#!/bin/bash
# Twenty-sixth session, call 7: around the new defaults (LANE_LOCAL_FINE 2, LANE_FOLD_GROUP 8)
# at the missed row: 4 local segments a real one, and other program sizes (FWD_WARPS).
source benchmarks/selective_scan/device_lib.sh
cd benchmarks/selective_scan
F=triton_fwd.LANE_LOCAL_FINE; W=triton_fwd.FWD_WARPS
V="base;$F=4;$W=1;$W=4;$F=1"
timeout 150 python3 fwd_knob_sweep.py --rounds 5 --shapes 1x1536x4096x16 --dtypes bf16 \
    --variants "$V" 2>&1 | tee $L/sweep.log | grep -E " ms|Error|rror"
el
