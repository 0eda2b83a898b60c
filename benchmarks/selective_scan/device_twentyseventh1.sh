#!/bin/bash
# Twenty-seventh session, call 1: the local pass in segments of its own length (the kernels'
# SNAP; triton_fwd.LANE_LOCAL_TILES, LANE_LOCAL_MAXNREG): GPU tests, then a sweep of local
# segment lengths at (1, 1536, 4096) beside the library's default (every variant checked against
# float64 first), and the kernels' durations under the benchmark's conditions.
source benchmarks/selective_scan/device_lib.sh
timeout 150 python3 -m pytest -q -rfE -m gpu -n 8 -p no:cacheprovider \
    tests/ops/selective_scan/test_selective_scan_triton.py -k "local_tiles or segments_of_tiles" \
    > $L/gpu_tests.log 2>&1
grep -E "^FAILED|^ERROR|passed|failed" $L/gpu_tests.log | tail -8
el
cd benchmarks/selective_scan
T=triton_fwd.LANE_LOCAL_TILES; M=triton_fwd.LANE_LOCAL_MAXNREG
V="base;$T=16;$T=20;$T=22;$T=24;$T=26;$T=28;$T=30;$T=22,$M=72;$T=26,$M=72;$T=15;$T=11"
timeout 260 python3 fwd_knob_sweep.py --rounds 3 --shapes 1x1536x4096x16 --dtypes bf16,fp32 \
    --variants "$V" 2>&1 | tee $L/sweep.log | grep -E " ms|Error|rror"
el
timeout 90 python3 fwd_kernel_split.py --graph --shapes 1x1536x4096x16 --dtypes bf16 \
    --variants "base;$T=22;$T=26;$T=30;$T=26,$M=72" 2>&1 | tee $L/split.log | tail -30
el
