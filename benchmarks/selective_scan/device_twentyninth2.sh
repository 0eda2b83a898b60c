#!/bin/bash
# Twenty-ninth session, call 2 (with experiments/twentyninth_map_overlap.patch applied): the real pass launched as a programmatic dependent of the local
# pass, waiting on per-program flags (triton_fwd.LANE_OVERLAP): timed against the library
# (every variant checked against float64 first), the kernels' span, then its GPU tests.
source benchmarks/selective_scan/device_lib.sh
cd benchmarks/selective_scan
O=triton_fwd.LANE_OVERLAP=1
V="base;$O;$O,triton_fwd.LANE_LOCAL_FINE=1;$O,triton_fwd.LANE_SEGMENTS=20;$O,triton_fwd.LANE_SEGMENTS=22"
V="$V;$O,triton_fwd.LANE_LOCAL_FINE=1,triton_fwd.LANE_SEGMENTS=20"
timeout 200 python3 fwd_knob_sweep.py --rounds 5 --shapes 1x1536x4096x16 --dtypes bf16,fp32 \
    --variants "$V" --out $OUT/sweep.json 2>&1 | tee $L/sweep.log | grep -E " ms|Error|rror"
el
timeout 90 python3 fwd_kernel_split.py --graph --shapes 1x1536x4096x16 --dtypes bf16 \
    --variants "base;$O;$O,triton_fwd.LANE_LOCAL_FINE=1" > $L/split.log 2>&1
grep -vE "^\s*$|Warn|warn" $L/split.log | tail -24
el
cd ../..
timeout 170 python3 -m pytest -q -rfE -m gpu -n 8 -p no:cacheprovider \
    tests/ops/selective_scan/test_selective_scan_triton.py -k "overlap or two_channels" \
    > $L/gpu_tests.log 2>&1
grep -E "^FAILED|^ERROR|passed|failed" $L/gpu_tests.log | tail -8
el
