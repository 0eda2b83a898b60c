#!/bin/bash
# Twenty-ninth session, call 4 (with experiments/twentyninth_map_overlap.patch applied): what
# bounds the local pass (probe 3: its decays without MUFU, as many instructions; wrong results)
# and the masked split passes with 32-bit row offsets (triton_fwd.LANE_SPLIT_I32), timed against
# the library at the split shapes, every variant but the probe checked against float64 first.
source benchmarks/selective_scan/device_lib.sh
cd benchmarks/selective_scan
timeout 100 python3 fwd_kernel_split.py --graph --shapes 1x1536x4096x16 --dtypes bf16 \
    --variants "base;triton_fwd.LANE_PROBE_LOCAL=3;triton_fwd.LANE_SPLIT_I32=1" > $L/split.log 2>&1
grep -vE "^\s*$|Warn|warn" $L/split.log | tail -18
el
timeout 200 python3 fwd_knob_sweep.py --rounds 5 --shapes 1x1536x4096x16,1x1024x65536x16 \
    --dtypes bf16,fp32 --variants "base;triton_fwd.LANE_SPLIT_I32=1" 2>&1 | tee $L/sweep.log \
    | grep -E " ms|Error|rror"
el
