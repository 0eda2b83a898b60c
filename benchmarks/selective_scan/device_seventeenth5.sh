#!/bin/bash
# Seventeenth session, call 5: call 4's GPU tests again on the final code (one forward loop call
# of the tile; call 4's run stopped at its 200-s limit with 154 passed, none failed), with a
# longer limit.
source benchmarks/selective_scan/device_lib.sh
gpu_tests 420 tests/ops/selective_scan/test_triton_fwd_lane.py \
    "tests/ops/selective_scan/test_selective_scan_triton.py::test_triton_gpu" \
    "tests/ops/selective_scan/test_selective_scan_triton.py::test_triton_gpu_forward_lane_options" \
    "tests/ops/selective_scan/test_selective_scan_triton.py::test_triton_gpu_forward_two_tiles_ahead" \
    "tests/ops/selective_scan/test_selective_scan_triton.py::test_compile_fullgraph_training_step_gpu" \
    tests/ops/common/test_launch_plan.py; el
