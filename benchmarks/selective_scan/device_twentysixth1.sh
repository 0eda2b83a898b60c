#!/bin/bash
# Twenty-sixth session, call 1: the time-lane chain (TLANE_CHAIN: a one-warp program a (channel,
# 64-step tile), tiles chained by a decoupled look-back; exponentials once, 98k warps at batch 1)
# checked on the GPU and timed beside the split at the batch-1 rows.
source benchmarks/selective_scan/device_lib.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
timeout 200 python3 -m pytest -q -rfE -m gpu -n 4 -p no:cacheprovider \
    tests/ops/selective_scan/test_triton_fwd_tlane.py -k "chain" > $L/gpu_tests.log 2>&1
grep -E "^FAILED|^ERROR|passed|failed" $L/gpu_tests.log | tail -8
el
cd benchmarks/selective_scan
CH="triton_fwd.FWD_TIME_LANES=1,triton_fwd.TLANE_CHAIN=1"
V="base;$CH;$CH,triton_fwd.TLANE_BC16=1"
timeout 200 python3 fwd_knob_sweep.py --rounds 3 --shapes 1x1536x4096x16,1x1024x65536x16 \
    --dtypes bf16,fp32 --variants "$V" 2>&1 | tee $L/sweep.log | grep -E " ms|Error|rror"
el
