#!/bin/bash
# Twenty-ninth session, call 6 (with experiments/twentyninth_map_overlap.patch applied): the
# two-channel real pass with its B / C rows loaded 4 steps ahead instead of a tile
# (triton_fwd.LANE_RING = 4, the kernel's RING): 32 registers fewer, 128 with the fold one
# segment at a time (LANE_FOLD_GROUP 0) or under a 128 cap (LANE_CH2_REGS), so 8 programs a
# multiprocessor and 22 segments in one wave. Every variant checked against float64 first.
source benchmarks/selective_scan/device_lib.sh
cd benchmarks/selective_scan
R=triton_fwd.LANE_RING=4; G=triton_fwd.LANE_FOLD_GROUP; S=triton_fwd.LANE_SEGMENTS
C=triton_fwd.LANE_CH2_REGS=128
V="base;$R;$R,$G=0,$S=22;$R,$G=0,$S=21;$R,$G=0,$S=20;$R,$G=4,$C,$S=22;$R,$G=8,$C,$S=22;$R,$G=0"
timeout 250 python3 fwd_knob_sweep.py --rounds 3 --shapes 1x1536x4096x16 --dtypes bf16,fp32 \
    --variants "$V" --out $OUT/sweep.json 2>&1 | tee $L/sweep.log | grep -E " ms|Error|rror"
el
timeout 100 python3 fwd_kernel_split.py --graph --shapes 1x1536x4096x16 --dtypes bf16 \
    --variants "base;$R;$R,$G=0,$S=22;$R,$G=4,$C,$S=22" > $L/split.log 2>&1
grep -vE "^\s*$|Warn|warn" $L/split.log | tail -24
el
