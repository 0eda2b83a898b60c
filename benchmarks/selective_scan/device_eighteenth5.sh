#!/bin/bash
# Eighteenth session, call 5 (no mamba-ssm build; its times from call 4): the batch-1 rows of
# bench_gpu.py again (eager op, public API, CUDA graphs), twice, with the launch plans that
# failed to record: call 4's eager op forward at (1, 1536, 4096) bf16 timed 0.157 ms against
# 0.102 under graphs, and an isolated eager probe 0.103.
source benchmarks/selective_scan/device_lib.sh
cd benchmarks/selective_scan
for r in 1 2; do
  timeout 120 python3 bench_gpu.py --graph --api --shapes 1x1536x4096x16,1x1024x65536x16 \
      --out $L/bench_b1_$r.json > $L/bench_b1_$r.log 2>&1
  grep -v '^{' $L/bench_b1_$r.log | tail -22; el
done
