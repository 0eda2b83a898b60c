#!/bin/bash
# Fourteenth session, call 2: call 1's three 2^20-step GPU tests failed before any kernel ran
# (the C kernels, their float64 oracle, were not built on the device machine): build them, run
# those tests, then the errors per output (long_errors.py).
source benchmarks/selective_scan/device_lib.sh
build_cpu_kernels; el
timeout 300 python3 -m pytest -q -rfE -m gpu -n 3 -p no:cacheprovider \
    tests/ops/selective_scan/test_long_sequences.py --durations=5 > "$L/gpu_tests.log" 2>&1
grep -E "^FAILED|^ERROR|^E  |passed|failed|s call" "$L/gpu_tests.log" | tail -20; el
timeout 200 python3 benchmarks/selective_scan/long_errors.py cuda > $L/long_errors.log 2>&1
tail -8 $L/long_errors.log; el
