#!/bin/bash
# NOT RUN: no device machine was lent in the thirty-first session (2026-12-04); kept ready for
# the next session that has one (see the closing note of issue 4).
# Thirty-first session, call 2: on the final main, mamba-ssm's CUDA kernel built in the
# background while AOTInductor packages a module calling the op (bf16 (1, 1536, 4096), the split
# forward) with the system compiler and loads it in a fresh process; then the full side-by-side
# benchmark (bench_gpu.py --graph: every shape and dtype, 3 interleaved rounds, each variant
# checked against float64 before it is timed).
source benchmarks/selective_scan/device_lib.sh
start_mamba_build
A=benchmarks/selective_scan/aoti_check.py
mkdir -p /tmp/aoti && CXX=/usr/bin/g++ timeout 200 python3 $A build /tmp/aoti bf16 1 1536 4096 \
    > $L/aoti.log 2>&1; echo "aoti build rc=$?"
CXX=/usr/bin/g++ timeout 120 python3 $A load /tmp/aoti bf16 1 1536 4096 >> $L/aoti.log 2>&1
echo "aoti load rc=$?"; grep -E "AOTI|error|Error" $L/aoti.log | tail -3
el
wait_mamba_build 240
el
cd benchmarks/selective_scan
timeout 280 python3 bench_gpu.py --graph --out $L/bench.json > $L/bench.log 2>&1
grep -v '^{' $L/bench.log | tail -30
el
