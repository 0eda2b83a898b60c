#!/bin/bash
# Twenty-second session, call 5 (run as one command line; kept here as a script), with
# triton_fwd.LANE_CH2 = 1 in the tree: the forward's GPU tests with the two-channel real pass
# wherever it applies, then forward ms under CUDA graphs at every benchmark shape against the
# one-channel real pass (LANE_CH2=0) and against the two-channel pass on the one-channel
# segment plan (LANE_CH2_WAVE_REGS=128).
source benchmarks/selective_scan/device_lib.sh
gpu_tests 280 tests/ops/selective_scan/test_selective_scan_triton.py \
    tests/ops/selective_scan/test_triton_fwd_lane.py
el
cd benchmarks/selective_scan
timeout 280 python3 fwd_knob_sweep.py --rounds 3 \
    --shapes 8x4096x2048x16,16x1536x1024x16,1x1536x4096x16,1x1024x65536x16 \
    --variants "base;triton_fwd.LANE_CH2=0;triton_fwd.LANE_CH2_WAVE_REGS=128" 2>&1 \
    | grep -E " ms|Error|rror"
el
