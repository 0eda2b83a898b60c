#!/bin/bash
# Twenty-ninth session, call 3 (with experiments/twentyninth_map_overlap.patch applied): what bounds the two-channel real pass: its time without the
# decays' MUFU (probe 3: as many instructions) and without softplus / the gate's sigmoid (probe 4:
# 100 instructions and 8 MUFU a tile-thread fewer), wrong results by design (no check).
source benchmarks/selective_scan/device_lib.sh
cd benchmarks/selective_scan
P=triton_fwd.LANE_PROBE_REAL
timeout 150 python3 fwd_kernel_split.py --graph --shapes 1x1536x4096x16 --dtypes bf16,fp32 \
    --variants "base;$P=3;$P=4;triton_fwd.LANE_SILU_TANH=1" > $L/split.log 2>&1
grep -vE "^\s*$|Warn|warn" $L/split.log | tail -48
el
