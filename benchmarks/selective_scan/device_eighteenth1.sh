#!/bin/bash
# Eighteenth session, call 1 (no mamba-ssm build): the lane forward's broadcasts of a tile's dt /
# dt * u from one inline asm (triton_fwd.LANE_BCAST_TILE: 0 a shuffle per step, 1 the default,
# 16-bit inputs, 2 always) and segments of whole tiles (triton_fwd.LANE_SEGMENTS) at batch 1,
# forward only, CUDA graphs (fwd_knob_sweep.py); then the GPU tests of both and of the grid.
source benchmarks/selective_scan/device_lib.sh
cd benchmarks/selective_scan
B="triton_fwd.LANE_BCAST_TILE"
S="triton_fwd.LANE_SEGMENTS"
timeout 200 python3 fwd_knob_sweep.py --variants "base;$B=0;$B=2;$S=11;$S=22;$S=27;$S=32;$S=22,$B=2" \
    --shapes 1x1536x4096x16 --out $L/sweep_b1.json > $L/sweep_b1.log 2>&1
cat $L/sweep_b1.log | tail -20; el
timeout 130 python3 fwd_knob_sweep.py --variants "base;$B=0;$B=2;$S=66;$S=82;$S=128" \
    --shapes 1x1024x65536x16 --rounds 2 --out $L/sweep_long.json > $L/sweep_long.log 2>&1
cat $L/sweep_long.log | tail -16; el
timeout 110 python3 fwd_knob_sweep.py --variants "base;$B=0;$B=2" \
    --shapes 8x4096x2048x16,16x1536x1024x16 --rounds 2 --out $L/sweep_big.json > $L/sweep_big.log 2>&1
cat $L/sweep_big.log | tail -16; el
cd ../..
gpu_tests 150 "tests/ops/selective_scan/test_selective_scan_triton.py::test_triton_gpu" \
    "tests/ops/selective_scan/test_selective_scan_triton.py::test_triton_gpu_lane_broadcast_modes" \
    "tests/ops/selective_scan/test_selective_scan_triton.py::test_triton_gpu_forward_segments_of_tiles" \
    tests/ops/selective_scan/test_triton_fwd_lane.py; el
