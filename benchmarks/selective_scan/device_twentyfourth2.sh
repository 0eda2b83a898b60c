#!/bin/bash
# Twenty-fourth session, call 2: the whole GPU suite (every test marked gpu, less the float64
# ones, which run the C kernel on the host) with the library's defaults: two channels a thread
# (LANE_CH2 = 1) and 16-bit B / C rows where they fill the waves (LANE_BC16 = 2), on 12 workers.
source benchmarks/selective_scan/device_lib.sh
build_cpu_kernels
timeout 560 python3 -m pytest -q -rfE -m gpu -n 12 -p no:cacheprovider tests/ -k "not float64" \
    > $L/gpu_tests.log 2>&1
grep -E "^FAILED|^ERROR|passed|failed" $L/gpu_tests.log | tail -12
el
