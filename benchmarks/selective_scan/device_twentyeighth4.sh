#!/bin/bash
# Twenty-eighth session, call 4: the GPU tests of the load masks and the real pass's own
# settings; then the unsplit shapes (where the library runs the unmasked loop) with masks kept
# on the loop's loads (LANE_EVEN_LDM 1 / 2) against none, 5 interleaved rounds, every dtype.
source benchmarks/selective_scan/device_lib.sh
F=tests/ops/selective_scan/test_selective_scan_triton.py
timeout 150 python3 -m pytest -q -rfE -m gpu -n 8 -p no:cacheprovider \
    $F::test_triton_gpu_forward_even_load_masks > $L/gpu_tests.log 2>&1
grep -E "^FAILED|^ERROR|passed|failed" $L/gpu_tests.log | tail -8
el
cd benchmarks/selective_scan
M=triton_fwd.LANE_EVEN_LDM
timeout 250 python3 fwd_knob_sweep.py --rounds 5 --shapes 8x4096x2048x16,16x1536x1024x16 \
    --dtypes bf16,fp16,fp32 --variants "base;$M=1;$M=2" 2>&1 | tee $L/sweep.log | grep -E " ms|Error|rror"
el
