#!/bin/bash
# Twenty-second session, call 7 (run as one command line, carry .whl; kept here as a script):
# with the two-channel real pass on by default (triton_fwd.LANE_CH2 = 1 and its wave rule,
# ``ch2_fills``), the forward's GPU tests, then forward ms under CUDA graphs at the benchmark
# shapes beside mamba-ssm's kernel (built meanwhile), the one-channel pass as the control.
source benchmarks/selective_scan/device_lib.sh
start_mamba_build
timeout 150 python3 -m pytest -q -rfE -m gpu -n 8 -p no:cacheprovider -k "not float64" \
    tests/ops/selective_scan/test_selective_scan_triton.py \
    tests/ops/selective_scan/test_triton_fwd_lane.py > $L/gpu_tests.log 2>&1
grep -E "^FAILED|^ERROR|passed|failed" $L/gpu_tests.log | tail -6; tail -c 300 $L/gpu_tests.log
el
wait_mamba_build 170
el
cd benchmarks/selective_scan
timeout 200 python3 fwd_knob_sweep.py --rounds 3 --mamba \
    --shapes 8x4096x2048x16,16x1536x1024x16,1x1536x4096x16,1x1024x65536x16 \
    --variants "base;triton_fwd.LANE_CH2=0" 2>&1 | grep -E " ms|Error|rror"
el
