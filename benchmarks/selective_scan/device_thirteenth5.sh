#!/bin/bash
# Thirteenth session, call 5: dB's and dC's partials in two buffers instead of views of one (two
# copies each under torch.compile): the split-path and compile GPU tests, then the compiled
# batch-1 step profiled again (compiled_profile.py).
source benchmarks/selective_scan/device_lib.sh
timeout 120 python3 -m pytest -q -rfE -m gpu -n 8 -p no:cacheprovider \
    tests/ops/selective_scan/test_selective_scan_triton.py -k "compile or lane-segments" \
    > "$L/gpu_tests.log" 2>&1
grep -E "^FAILED|^ERROR|passed|failed" "$L/gpu_tests.log" | tail -8; el
cd benchmarks/selective_scan
timeout 110 python3 compiled_profile.py 1 1536 4096 16 --dtype bf16 > $L/compiled_profile.log 2>&1
grep -v "^W1\|Warning" $L/compiled_profile.log | cut -c1-150 | grep -v "^ *_warn_once\|0.000us       0.000us" | tail -60; el
