#!/bin/bash
# Twelfth session, call 2: the segment passes trimmed (the forward's local pass skips the last
# segment, the backward's skips the first) and the backward's carry folded into the lane main
# kernel (CARRY_IN_MAIN). The selective-scan and plan GPU tests, then the benchmark beside
# mamba-ssm with the carry kernel timed beside the fold (lane-carrykernel). Logs under $OUT/logs.
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))s"; }
L=${OUT:-/tmp}/logs; mkdir -p $L
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
(lscpu | grep -E "Model name|^CPU\(s\)|MHz"; uptime) > $L/host.txt 2>&1
mkdir -p /tmp/mb && tar xzf .whl/mamba_ssm-*.tar.gz -C /tmp/mb
(MAX_JOBS=8 setsid nohup python3 .whl/build_mamba_cuda.py > /tmp/build.log 2>&1 &)
timeout 280 python3 -m pytest -q -rfE -m gpu -n 8 -p no:cacheprovider tests/ops/selective_scan \
    tests/ops/common -k "not float64" > $L/gpu_tests.log 2>&1
grep -E "^FAILED|^ERROR|passed|failed|could not compile" $L/gpu_tests.log | tail -8; el
cd benchmarks/selective_scan
for i in $(seq 1 60); do grep -q BUILD_OK /tmp/build.log && break; sleep 5; done
cp /tmp/build.log $L/; tail -1 /tmp/build.log; el
export PYTHONPATH=$PYTHONPATH:/tmp/mbuild
timeout 250 python3 bench_gpu.py --graph --api --bwd-variants lane,lane-carrykernel \
    --out $L/bench.json > $L/bench.log 2>&1
grep -v '^{' $L/bench.log | tail -44; el
