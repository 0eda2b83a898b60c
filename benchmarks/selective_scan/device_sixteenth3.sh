#!/bin/bash
# Sixteenth session, call 3: the lane forward's y reduced over a tile's lanes once per tile
# (triton_fwd.LANE_Y_SCATTER, on): the lane forward's GPU tests (the grid against float64), the
# split forward's stall reasons under Nsight Compute at (1, 1536, 4096, 16) bf16, then the
# benchmark at every shape, the scatter on and off, with and without a 128-register cap.
source benchmarks/selective_scan/device_lib.sh
start_mamba_build
gpu_tests 170 tests/ops/selective_scan/test_triton_fwd_lane.py \
    "tests/ops/selective_scan/test_selective_scan_triton.py::test_triton_gpu" \
    "tests/ops/selective_scan/test_selective_scan_triton.py::test_triton_gpu_forward_unrolled"; el
cd benchmarks/selective_scan
timeout 60 ncu --clock-control none -k regex:_selective_scan_fwd -c 2 --section WarpStateStats \
  --section LaunchStats --section Occupancy --section SchedulerStats -f -o /tmp/ncu_split \
  python3 profile_gpu.py --once --fwd --shapes 1x1536x4096x16 --dtypes bf16 > $L/ncu_split.log 2>&1
ncu --import /tmp/ncu_split.ncu-rep --page raw > $OUT/ncu_split_raw.txt 2>&1
ncu --import /tmp/ncu_split.ncu-rep --page details > $OUT/ncu_split.txt 2>&1
grep -E "_selective_scan_fwd|gpu__time_duration.sum|launch__registers_per_thread|issue_stalled.*per_warp_active|warp_latency_issue_stalled" $OUT/ncu_split_raw.txt | grep -v "pcsamp" | head -60
el
cd ../..
wait_mamba_build 250; el
cd benchmarks/selective_scan
timeout 290 python3 bench_gpu.py --graph --bwd-variants lane,lane-f128 --fwd-variants lane,lane-nosc \
    --out $L/bench.json > $L/bench.log 2>&1
grep -v '^{' $L/bench.log | tail -36; el
