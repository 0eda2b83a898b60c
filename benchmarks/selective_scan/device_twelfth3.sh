#!/bin/bash
# Twelfth session, call 3 (right after call 2, same machine): where the public API's batch-1
# host time goes (cProfile of its forward and of its backward called on this thread), and the
# host split of a training step. Logs under $OUT/logs.
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))s"; }
L=${OUT:-/tmp}/logs; mkdir -p $L
export PYTHONPATH=$PWD/src:/tmp/mbuild PYTHONUNBUFFERED=1
(lscpu | grep -E "Model name|^CPU\(s\)|MHz"; uptime) > $L/host.txt 2>&1
cd benchmarks/selective_scan
for d in bf16 fp32; do timeout 50 python3 api_host_split.py 1 1536 4096 16 --dtype $d; done \
    > $L/api_host_split.log 2>&1
cat $L/api_host_split.log; el
timeout 90 python3 host_profile.py 1 1536 4096 16 --dtype bf16 --api --top 40 > $L/host_profile_api.log 2>&1
timeout 60 python3 host_profile.py 1 1536 4096 16 --dtype bf16 --top 30 > $L/host_profile_op.log 2>&1
grep -A45 "by tottime" $L/host_profile_api.log | head -120; el
