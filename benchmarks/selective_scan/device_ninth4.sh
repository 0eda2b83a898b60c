#!/bin/bash
# Ninth session, last (short) device call: the GPU tests on the tightened eager launch path
# (per-signature binding plans, one None pass), then the host breakdown at batch 1.
T0=$(date +%s)
L=/tmp/logs; mkdir -p $L
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
timeout 170 python3 -m pytest -q -rfE -m gpu -n 12 -p no:cacheprovider tests/ops -k "not float64" \
    > $L/gpu_tests.log 2>&1
grep -E "^FAILED|^ERROR|passed|failed" $L/gpu_tests.log | tail -8; echo "t=$(( $(date +%s) - T0 ))s"
cd benchmarks/selective_scan
timeout 40 python3 host_breakdown.py 1 1536 4096 16 --dtype bf16 2>&1 | grep -v "kernel\[grid\]" \
    | sed 's/ \+/ /g' | tee $L/host_breakdown.log
tar czf $OUT/logs.tar.gz -C /tmp logs; echo "t=$(( $(date +%s) - T0 ))s"
