#!/bin/bash
# Twenty-seventh session, call 5: AOTInductor on the unmasked path (an unsplit bf16 forward at
# (16, 1536, 1024): triton_fwd.LANE_EVEN), built with the system compiler and loaded in a fresh
# process (twice if the first load runs out of time, as the ninth session saw), then the GPU tests
# of the unmasked loop.
source benchmarks/selective_scan/device_lib.sh
A=benchmarks/selective_scan/aoti_check.py
mkdir -p /tmp/aoti && CXX=/usr/bin/g++ timeout 100 python3 $A build /tmp/aoti bf16 16 1536 1024 \
    > $L/aoti.log 2>&1; echo "aoti build rc=$?"; grep -E "exported|packaged" $L/aoti.log | cut -c1-150
el
for t in 90 45; do
  timeout $t python3 $A load /tmp/aoti bf16 16 1536 1024 >> $L/aoti.log 2>&1; rc=$?
  echo "aoti load rc=$rc"; el; [ $rc = 0 ] && break
done
grep -E "AOTI" $L/aoti.log | tail -2
F=tests/ops/selective_scan/test_selective_scan_triton.py
timeout 60 python3 -m pytest -q -rfE -m gpu -n 8 -p no:cacheprovider $F::test_triton_gpu_forward_even \
    > $L/gpu_tests.log 2>&1
grep -E "^FAILED|^ERROR|passed|failed" $L/gpu_tests.log | tail -4
el
