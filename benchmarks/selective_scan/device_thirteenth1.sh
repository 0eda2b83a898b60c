#!/bin/bash
# For the next device session (written in the twelfth): the reduce-overhead compile GPU test and
# the whole GPU suite with the traced backward's prefetch off (Note [traced kernels' inline
# asm]: not yet run on a GPU), then the batch-1 training step in eager, under
# torch.compile(mode="reduce-overhead") and beside mamba-ssm (compiled_step.py), then the
# benchmark. One call (logs under $OUT/logs).
source benchmarks/selective_scan/device_lib.sh
start_mamba_build
gpu_tests 330 tests/; el
cd benchmarks/selective_scan
wait_mamba_build 300; el
for d in bf16 fp32; do timeout 60 python3 compiled_step.py 1 1536 4096 16 --dtype $d; done \
    > $L/compiled_step.log 2>&1
grep -v "^W1\|Warning" $L/compiled_step.log | tail -10; el
timeout 150 python3 bench_gpu.py --graph --api --out $L/bench.json > $L/bench.log 2>&1
grep -v '^{' $L/bench.log | tail -34; el
