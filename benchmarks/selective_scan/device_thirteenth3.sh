#!/bin/bash
# Thirteenth session, call 3: the final code (the states kernel with the segments' local pass,
# capped at 128 registers): the whole GPU suite (call 2's selective-scan tests ran past their
# limit), with the slowest tests listed, then the benchmark beside mamba-ssm.
source benchmarks/selective_scan/device_lib.sh
start_mamba_build
timeout 400 python3 -m pytest -q -rfE -m gpu -n 8 -p no:cacheprovider tests/ -k "not float64" \
    --durations=12 > "$L/gpu_tests.log" 2>&1
grep -E "^FAILED|^ERROR|passed|failed|could not compile|assuming every input|s call" \
    "$L/gpu_tests.log" | tail -22; el
cd benchmarks/selective_scan
wait_mamba_build 120; el
timeout 150 python3 bench_gpu.py --graph --api --out $L/bench.json > $L/bench.log 2>&1
grep -v '^{' $L/bench.log | tail -34; el
