#!/bin/bash
# Eighth session, call 4 (final): every GPU test on the final code (fused B / C copy, finish
# kernel with dA / dD / ddelta_bias folded in, the lane forward's in-kernel carry, fewer host
# ops), the errors vs float64, per-kernel breakdowns, the host overhead, the benchmark.
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))s"; }
L=/tmp/logs; mkdir -p $L /tmp/mb && tar xzf .whl/mamba_ssm-*.tar.gz -C /tmp/mb
(MAX_JOBS=8 setsid nohup python3 .whl/build_mamba_cuda.py > $L/build.log 2>&1 &)
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
timeout 230 python3 -m pytest -q -rfE -m gpu -n 10 -p no:cacheprovider tests/ -k "not float64" \
    > $L/gpu_tests.log 2>&1
grep -E "^FAILED|passed|failed" $L/gpu_tests.log | tail -12; el
timeout 70 python3 benchmarks/selective_scan/gpu_errors.py cuda lane > $L/errors.txt 2>&1; tail -3 $L/errors.txt; el
cd benchmarks/selective_scan
timeout 40 python3 profile_gpu.py --breakdown --shapes 16x1536x1024x16,1x1536x4096x16,1x1024x65536x16 \
    --dtypes bf16 --bwd-variants lane > $L/breakdown.txt 2>&1
timeout 30 python3 profile_gpu.py --breakdown --fwd --shapes 16x1536x1024x16,1x1536x4096x16,1x1024x65536x16 \
    --dtypes bf16 > $L/fwd_breakdown.txt 2>&1
grep -E "bwd=|fwd:|_kernel" $L/breakdown.txt $L/fwd_breakdown.txt | cut -c1-100; el
for i in $(seq 1 40); do grep -q BUILD_OK $L/build.log && break; sleep 5; done
tail -1 $L/build.log
export PYTHONPATH=$PYTHONPATH:/tmp/mbuild
timeout 90 python3 host_overhead.py > $L/host.txt 2>&1; cat $L/host.txt; el
timeout 150 python3 bench_gpu.py --graph --bwd-variants lane --out $L/bench.json > $L/bench.log 2>&1
grep -v '^{' $L/bench.log | tail -20
tar czf $OUT/logs.tar.gz -C /tmp logs; el
