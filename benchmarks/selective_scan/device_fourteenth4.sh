#!/bin/bash
# Fourteenth session, call 4: the lane forward's B / C rows from one pointer per tile for 16-bit
# inputs only (call 3: fp32 slower with it, bf16 faster); the GPU grid tests, then the benchmark
# beside mamba-ssm (the session's final numbers).
source benchmarks/selective_scan/device_lib.sh
start_mamba_build
timeout 240 python3 -m pytest -q -rfE -m gpu -n 8 -p no:cacheprovider \
    tests/ops/selective_scan/test_selective_scan_triton.py -k "not compile and not float64" \
    > "$L/gpu_tests.log" 2>&1
grep -E "^FAILED|^ERROR|passed|failed" "$L/gpu_tests.log" | tail -8; el
wait_mamba_build 150; el
cd benchmarks/selective_scan
timeout 130 python3 bench_gpu.py --graph --api --out $L/bench.json > $L/bench.log 2>&1
grep -v '^{' $L/bench.log | tail -34; el
