#!/bin/bash
# Twelfth session, call 4: the final code (the backward folds the carry up to FOLD_MAX_SEGMENTS =
# 16 segments, the carry kernel beyond): selective-scan and plan GPU tests, the benchmark beside
# mamba-ssm, 128-step checkpoints at the split shapes (forward and backward), and the host split
# of a batch-1 training step with the backward's engine time broken down. Logs under $OUT/logs.
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))s"; }
L=${OUT:-/tmp}/logs; mkdir -p $L
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
(lscpu | grep -E "Model name|^CPU\(s\)"; uptime) > $L/host.txt 2>&1
mkdir -p /tmp/mb && tar xzf .whl/mamba_ssm-*.tar.gz -C /tmp/mb
(MAX_JOBS=8 setsid nohup python3 .whl/build_mamba_cuda.py > /tmp/build.log 2>&1 &)
timeout 245 python3 -m pytest -q -rfE -m gpu -n 8 -p no:cacheprovider tests/ops/selective_scan \
    tests/ops/common -k "not float64" > $L/gpu_tests.log 2>&1
grep -E "^FAILED|^ERROR|passed|failed|could not compile" $L/gpu_tests.log | tail -8; el
cd benchmarks/selective_scan
for i in $(seq 1 40); do grep -q BUILD_OK /tmp/build.log && break; sleep 5; done
cp /tmp/build.log $L/; tail -1 /tmp/build.log; el
export PYTHONPATH=$PYTHONPATH:/tmp/mbuild
timeout 160 python3 bench_gpu.py --graph --api --out $L/bench.json > $L/bench.log 2>&1
grep -v '^{' $L/bench.log | tail -34; el
timeout 70 python3 bench_gpu.py --graph --ck 128 --shapes 1x1536x4096x16,1x1024x65536x16 \
    --out $L/bench_ck128.json > $L/bench_ck128.log 2>&1
grep -v '^{' $L/bench_ck128.log | tail -12; el
for d in bf16 fp32; do timeout 30 python3 api_host_split.py 1 1536 4096 16 --dtype $d; done \
    > $L/api_host_split.log 2>&1
cat $L/api_host_split.log; el
