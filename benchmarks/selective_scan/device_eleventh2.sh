#!/bin/bash
# Eleventh session: why a replayed backward differed from the normal path in
# test_api_fast_path_equals_op_gpu[last-only-*] (plan_debug.py under variants and sanitizers).
L=${OUT:-/tmp}/logs; mkdir -p $L
export PYTHONPATH=$PWD/src:$PWD/tests PYTHONUNBUFFERED=1
P=benchmarks/selective_scan/plan_debug.py
run() { echo "== $*"; timeout 100 "$@" 2>&1 | tail -60; }
{
run python3 $P
run env CUDA_LAUNCH_BLOCKING=1 python3 $P
run python3 $P --align 1048576
run python3 $P --no-arena
run python3 $P --dtype bf16
} > $L/variants.log 2>&1
grep -E "^==|grads differing|wrong at|Error" $L/variants.log
awk '/^== env/{exit} {print}' $L/variants.log | grep -E "plan:|launch|empty|op |call" | head -70
for tool in initcheck memcheck; do
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 150 compute-sanitizer --tool $tool --print-limit 20 \
      python3 $P > $L/san_$tool.log 2>&1
  echo "== $tool"; grep -E "ERROR SUMMARY|grads differing" $L/san_$tool.log
  grep -E "^=========" $L/san_$tool.log | grep -vE "^========= *$" | head -30
done
