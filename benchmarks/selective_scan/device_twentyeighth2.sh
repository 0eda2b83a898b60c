#!/bin/bash
# Twenty-eighth session, call 2: the whole GPU suite (every test marked gpu, less the float64
# ones, which run the C kernel on the host) on the twenty-seventh session's kernels and the
# library's defaults, 12 workers.
source benchmarks/selective_scan/device_lib.sh
timeout 570 python3 -m pytest -q -rfE -m gpu -n 12 -p no:cacheprovider tests/ -k "not float64" \
    --durations=15 > $L/gpu_tests.log 2>&1
grep -E "^FAILED|^ERROR|passed|failed" $L/gpu_tests.log | tail -12
grep -E "^[.FEsx]+( |$)" $L/gpu_tests.log | tr -d ' \n[%]0-9' | wc -c
el
