#!/bin/bash
# Twenty-sixth session, call 8: 16-bit B / C rows in both passes (LANE_BC16 1: the local pass at
# 48 registers, the two-channel real pass at 128) with the finer local pass, at the missed row.
source benchmarks/selective_scan/device_lib.sh
cd benchmarks/selective_scan
F=triton_fwd.LANE_LOCAL_FINE; R=triton_fwd.LANE_BC16; S=triton_fwd.LANE_SEGMENTS
V="base;$R=1;$R=1,$F=4;$R=1,$S=22;$R=1,$S=16"
timeout 120 python3 fwd_knob_sweep.py --rounds 5 --shapes 1x1536x4096x16 --dtypes bf16 \
    --variants "$V" 2>&1 | tee $L/sweep.log | grep -E " ms|Error|rror"
el
