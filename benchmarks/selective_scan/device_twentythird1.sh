#!/bin/bash
# Twenty-third session, call 1 (run as one command line; kept here as a script; ~6 minutes of
# device time were left, so no mamba-ssm build: its figures are the earlier sessions'): with the
# two-channel real pass on by default (triton_fwd.LANE_CH2 = 1, its wave rule ``ch2_fills``),
# the forward's GPU tests (less the split backward's and the lane options' ones, which do not
# reach it), then forward ms under CUDA graphs at the benchmark shapes, the one-channel real
# pass as the control.
source benchmarks/selective_scan/device_lib.sh
timeout 110 python3 -m pytest -q -rfE -m gpu -n 8 -p no:cacheprovider \
    tests/ops/selective_scan/test_selective_scan_triton.py \
    tests/ops/selective_scan/test_triton_fwd_lane.py tests/ops/selective_scan/test_eager_path.py \
    tests/ops/linear_scan/test_linear_scan_triton.py tests/ops/common/test_launch_plan.py \
    -k "not float64 and not split_backward and not lane_options" > $L/gpu_tests.log 2>&1
grep -E "^FAILED|^ERROR|passed|failed" $L/gpu_tests.log | tail -8
el
cd benchmarks/selective_scan
timeout 110 python3 fwd_knob_sweep.py --rounds 3 \
    --shapes 1x1536x4096x16,16x1536x1024x16,8x4096x2048x16,1x1024x65536x16 \
    --variants "base;triton_fwd.LANE_CH2=0" 2>&1 | tee $L/sweep.log | grep -E " ms|Error|rror"
el
