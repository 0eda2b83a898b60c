#!/bin/bash
# Twenty-fifth session, call 6 (with experiments/twentyfifth_tlane_u32.patch applied): the
# two-channel time-lane forward with bf16 u / delta / z carried as int32 words (TLANE_U32: no
# unpack at the loop's end waiting for the next tile's loads), timed beside the split; its GPU
# tests.
source benchmarks/selective_scan/device_lib.sh
cd benchmarks/selective_scan
TL="triton_fwd.FWD_TIME_LANES=1,triton_fwd.TLANE_CH2=1"
R16="triton_fwd.TLANE_BC16=1"
U="triton_fwd.TLANE_U32=1"
V="base;$TL,triton_fwd.TLANE_BC_MODE=2,$R16;$TL,triton_fwd.TLANE_BC_MODE=2,$R16,$U;$TL,triton_fwd.TLANE_BC_MODE=1,$R16,$U"
V="$V;$TL,triton_fwd.TLANE_BC_MODE=2,$U;$TL,triton_fwd.TLANE_BC_MODE=1,$U"
timeout 150 python3 fwd_knob_sweep.py --rounds 3 --shapes 1x1536x4096x16 --dtypes bf16 \
    --variants "$V" 2>&1 | tee $L/sweep.log | grep -E " ms|Error|rror"
el
cd ../..
timeout 150 python3 -m pytest -q -rfE -m gpu -n 4 -p no:cacheprovider \
    tests/ops/selective_scan/test_triton_fwd_tlane.py -k "ch2" > $L/gpu_tests.log 2>&1
grep -E "^FAILED|^ERROR|passed|failed" $L/gpu_tests.log | tail -8
el
