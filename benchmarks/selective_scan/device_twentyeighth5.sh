#!/bin/bash
# Twenty-eighth session, call 5: the load-mask GPU tests again, their launch check fixed (call 4:
# every case matched float64, the check then read the two-channel real pass's missing LOCAL as
# None instead of False).
source benchmarks/selective_scan/device_lib.sh
F=tests/ops/selective_scan/test_selective_scan_triton.py
timeout 200 python3 -m pytest -q -rfE -m gpu -n 8 -p no:cacheprovider \
    $F::test_triton_gpu_forward_even_load_masks $F::test_triton_gpu_forward_even > $L/gpu_tests.log 2>&1
grep -E "^FAILED|^ERROR|^E  |passed|failed" $L/gpu_tests.log | tail -8
el
