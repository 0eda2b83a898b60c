#!/bin/bash
# Twelfth session, call 5 (the last ~6 minutes of device time, so no mamba-ssm build): the
# reduce-overhead compile GPU test, then the batch-1 training step in eager and under
# torch.compile(mode="reduce-overhead") (compiled_step.py). Logs under $OUT/logs.
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))s"; }
L=${OUT:-/tmp}/logs; mkdir -p $L
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
timeout 100 python3 -m pytest -q -rfE -m gpu -p no:cacheprovider \
    tests/ops/selective_scan/test_selective_scan_triton.py -k reduce_overhead > $L/gpu_test.log 2>&1
tail -3 $L/gpu_test.log; el
cd benchmarks/selective_scan
for d in bf16 fp32; do timeout 65 python3 compiled_step.py 1 1536 4096 16 --dtype $d; done \
    > $L/compiled_step.log 2>&1
cat $L/compiled_step.log | grep -v Warning | tail -12; el
