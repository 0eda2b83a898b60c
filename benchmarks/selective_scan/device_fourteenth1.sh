#!/bin/bash
# Fourteenth session, call 1: the two-level sums over L (Note [long sums]) in every Triton
# backward: the whole GPU suite (with the new 2^20-step test and the thirteenth session's
# lane-path compile test, neither run on a GPU before), the benchmark beside mamba-ssm, then the
# errors at 2^20 steps per output (long_errors.py).
source benchmarks/selective_scan/device_lib.sh
start_mamba_build
timeout 360 python3 -m pytest -q -rfE -m gpu -n 8 -p no:cacheprovider tests/ -k "not float64" \
    --durations=15 > "$L/gpu_tests.log" 2>&1
grep -E "^FAILED|^ERROR|passed|failed|could not compile|assuming every input|s call" \
    "$L/gpu_tests.log" | tail -24; el
wait_mamba_build 60; el
(cd benchmarks/selective_scan && timeout 140 python3 bench_gpu.py --graph --api --out $L/bench.json \
    > $L/bench.log 2>&1)
grep -v '^{' $L/bench.log | tail -34; el
timeout 80 python3 benchmarks/selective_scan/long_errors.py cuda > $L/long_errors.log 2>&1
tail -8 $L/long_errors.log; el
