#!/bin/bash
# Seventeenth session, call 4: the defaults as committed (the lane forward's B / C rows rolled,
# triton_fwd.LANE_BC_ROLL): the lane forward's GPU tests, the grid, compile and launch-plan GPU
# tests, the forward options' tests, then the full benchmark beside mamba-ssm (eager op, public
# API, CUDA graphs).
source benchmarks/selective_scan/device_lib.sh
start_mamba_build
gpu_tests 200 tests/ops/selective_scan/test_triton_fwd_lane.py \
    "tests/ops/selective_scan/test_selective_scan_triton.py::test_triton_gpu" \
    "tests/ops/selective_scan/test_selective_scan_triton.py::test_triton_gpu_forward_lane_options" \
    "tests/ops/selective_scan/test_selective_scan_triton.py::test_triton_gpu_forward_two_tiles_ahead" \
    "tests/ops/selective_scan/test_selective_scan_triton.py::test_compile_fullgraph_training_step_gpu" \
    tests/ops/common/test_launch_plan.py; el
wait_mamba_build 250; el
cd benchmarks/selective_scan
timeout 260 python3 bench_gpu.py --graph --api --out $L/bench.json > $L/bench.log 2>&1
grep -v '^{' $L/bench.log | tail -40; el
