#!/bin/bash
# Twenty-ninth session, call 5 (with experiments/twentyninth_map_overlap.patch applied): the fold's
# cost in the two-channel real pass (probe 5: no fold, wrong results) at the library's segments,
# and at 12 / 20 segments (how the fold and the segments' length trade).
source benchmarks/selective_scan/device_lib.sh
cd benchmarks/selective_scan
P=triton_fwd.LANE_PROBE_REAL=5; S=triton_fwd.LANE_SEGMENTS
timeout 100 python3 fwd_kernel_split.py --graph --shapes 1x1536x4096x16 --dtypes bf16,fp32 \
    --variants "base;$P;$P,$S=12;$S=12" > $L/split.log 2>&1
grep -vE "^\s*$|Warn|warn" $L/split.log | tail -50
el
