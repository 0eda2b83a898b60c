#!/bin/bash
# Eleventh session: the recorder's view / pointer checks on the GPU (plan_debug.py with the raw
# records), the failing test, then every GPU test with plans on.
L=${OUT:-/tmp}/logs; mkdir -p $L
export PYTHONPATH=$PWD/src:$PWD/tests PYTHONUNBUFFERED=1
timeout 100 python3 benchmarks/selective_scan/plan_debug.py > $L/debug.log 2>&1
grep -E "grads differing|wrong at|rejected|record:" $L/debug.log
awk '/^record: /{n++} n==2' $L/debug.log | head -60
timeout 120 python3 -m pytest -q -rfE -p no:cacheprovider -m gpu tests/ops/selective_scan/test_eager_path.py \
    tests/ops/common/test_launch_plan.py > $L/focused.log 2>&1
tail -3 $L/focused.log
timeout 230 python3 -m pytest -q -rfE -m gpu -n 8 -p no:cacheprovider tests/ -k "not float64" \
    > $L/gpu_tests.log 2>&1
grep -E "^FAILED|^ERROR|passed|failed|could not compile" $L/gpu_tests.log | tail -8
