#!/bin/bash
# Twenty-seventh session, call 2: the lane forward's loop without masks and with 32-bit row
# offsets (triton_fwd.LANE_EVEN / LANE_I32, on by default): GPU tests of the forward, then the
# sweep beside mamba-ssm (built in the same call) at every benchmark shape, every variant checked
# against float64 first, and the kernels' durations at the missed row.
source benchmarks/selective_scan/device_lib.sh
start_mamba_build
F=tests/ops/selective_scan/test_selective_scan_triton.py
timeout 200 python3 -m pytest -q -rfE -m gpu -n 8 -p no:cacheprovider -k "not float64" \
    $F::test_triton_gpu_forward_even $F::test_triton_gpu_forward_local_tiles \
    $F::test_triton_gpu_forward_segments_of_tiles $F::test_triton_gpu \
    $F::test_triton_gpu_forward_two_channels $F::test_triton_gpu_forward_rows16 \
    > $L/gpu_tests.log 2>&1
grep -E "^FAILED|^ERROR|passed|failed" $L/gpu_tests.log | tail -8
el
cd benchmarks/selective_scan
E=triton_fwd.LANE_EVEN; I=triton_fwd.LANE_I32; T=triton_fwd.LANE_LOCAL_TILES
timeout 120 python3 fwd_kernel_split.py --graph --shapes 1x1536x4096x16 --dtypes bf16 \
    --variants "base;$E=0,$I=0;$E=0;$I=0" 2>&1 | tee $L/split.log | tail -24
el
wait_mamba_build 200
el
timeout 200 python3 fwd_knob_sweep.py --mamba --rounds 5 --shapes 1x1536x4096x16 --dtypes bf16,fp32 \
    --variants "base;$E=0,$I=0;$E=0;$I=0;$T=20;$T=16" 2>&1 | tee $L/sweep.log | grep -E " ms|Error|rror"
el
timeout 150 python3 fwd_knob_sweep.py --mamba --rounds 3 \
    --shapes 8x4096x2048x16,16x1536x1024x16,1x1024x65536x16 --dtypes bf16,fp32 \
    --variants "base;$E=0,$I=0" 2>&1 | tee $L/sweep2.log | grep -E " ms|Error|rror"
el
