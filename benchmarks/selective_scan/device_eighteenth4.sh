#!/bin/bash
# Eighteenth session, call 4: the committed defaults (one-asm tile broadcasts for 16-bit inputs,
# LANE_BCAST_TILE = 1; segments of tiles filling the real pass's waves, LANE_SEGMENTS = -1):
# the full benchmark beside mamba-ssm (eager op, public API, CUDA graphs), then forward+backward
# at the batch-1 shapes with the broadcasts off (lane-bt0: the backward's states kernel too).
source benchmarks/selective_scan/device_lib.sh
start_mamba_build
wait_mamba_build 330; el
cd benchmarks/selective_scan
timeout 240 python3 bench_gpu.py --graph --api --out $L/bench.json > $L/bench.log 2>&1
grep -v '^{' $L/bench.log | tail -40; el
timeout 100 python3 bench_gpu.py --graph --fwd-variants lane,lane-bt0 \
    --shapes 1x1536x4096x16,1x1024x65536x16 --out $L/bench_bt.json > $L/bench_bt.log 2>&1
grep -v '^{' $L/bench_bt.log | tail -24; el
