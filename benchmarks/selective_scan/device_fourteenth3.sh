#!/bin/bash
# Fourteenth session, call 3: the B / C rows (and the lane backward's dB / dC partial rows) from
# one pointer per tile, step j at a constant offset (no per-step 64-bit address arithmetic), and
# the lane forward unrolled (FWD_UNROLL, off by default): the selective-scan GPU tests, the
# benchmark beside mamba-ssm, then the unroll variants at the batch-1 / small-batch shapes.
source benchmarks/selective_scan/device_lib.sh
start_mamba_build
build_cpu_kernels
gpu_tests 330 tests/ops/selective_scan/; el
wait_mamba_build 60; el
cd benchmarks/selective_scan
timeout 100 python3 bench_gpu.py --graph --out $L/bench.json > $L/bench.log 2>&1
grep -v '^{' $L/bench.log | tail -34; el
timeout 130 python3 bench_gpu.py --graph --shapes 1x1536x4096x16,1x1024x65536x16,16x1536x1024x16 \
    --bwd-variants lane-u21,lane-u12,lane-u22,lane-u22-f128 --out $L/unroll.json > $L/unroll.log 2>&1
grep -v '^{' $L/unroll.log | grep -v "^$" | head -30; el
