#!/bin/bash
# Thirtieth session, call 5 (with experiments/thirtieth_u16_bcast.patch applied): fewer MIO instructions in the split forward's passes (the local
# pass's top stall, call 4): u broadcast in bf16 as loaded, two steps a shuffle (U16: the local
# pass 14 shuffles a tile-warp instead of 18, 9.6 more instructions; the two-channel real pass 36
# instead of 44, 7 more, and 128 registers instead of 161, so 8 programs a multiprocessor: with
# 16 segments, and with the 22 that fill one wave of them), the local pass's dt sums reduced
# once at the end (DT_DEFER: 2 shuffles fewer). GPU tests of the options, kernel durations,
# forward ms (5 rounds, checked against float64 first).
source benchmarks/selective_scan/device_lib.sh
gpu_tests 120 tests/ops/selective_scan/test_selective_scan_triton.py -k "gpu_forward_pass_options"
el
cd benchmarks/selective_scan
U=LOCAL.U16=1; D=LOCAL.DT_DEFER=1; R=REAL.U16=1; W=triton_fwd.LANE_CH2_WAVE_REGS=128
V="base;$U;$U,$D;$R;$R,$W;$U,$D,$R;$U,$D,$R,$W"
timeout 120 python3 fwd_kernel_split.py --graph --shapes 1x1536x4096x16 --dtypes bf16 \
    --variants "$V" > $L/split.log 2>&1
grep -vE "^\s*$|Warn|warn|_warn" $L/split.log | grep -vE "prep_bc" | tail -30
el
timeout 200 python3 fwd_knob_sweep.py --rounds 5 --shapes 1x1536x4096x16,1x1024x65536x16 \
    --dtypes bf16 --variants "$V" --out $OUT/sweep.json 2>&1 | tee $L/sweep.log \
    | grep -E " ms|Error|rror"
el
