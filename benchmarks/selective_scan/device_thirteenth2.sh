#!/bin/bash
# Thirteenth session, call 2: the selective-scan and plan GPU tests (the reduce-overhead compile
# after the mutation-analysis fix, the states kernel with the segments' local pass), the batch-1
# training step compiled beside mamba-ssm (after the kernel-source fix), and the local pass in
# the states kernel (STATES_ADJ) timed against its own kernel and with a register cap.
source benchmarks/selective_scan/device_lib.sh
start_mamba_build
gpu_tests 250 tests/ops/selective_scan tests/ops/common; el
cd benchmarks/selective_scan
wait_mamba_build 200; el
timeout 75 python3 compiled_step.py 1 1536 4096 16 --dtype bf16 > $L/compiled_step.log 2>&1
grep -v "^W1\|Warning" $L/compiled_step.log | tail -6; el
timeout 150 python3 bench_gpu.py --graph --shapes 1x1536x4096x16,1x1024x65536x16 \
    --bwd-variants lane,lane-nostatesadj,lane-s128 --out $L/bench_adj.json > $L/bench_adj.log 2>&1
grep -v '^{' $L/bench_adj.log | tail -32; el
