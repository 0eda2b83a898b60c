#!/bin/bash
# Eighth session, call 3: the lane main kernel's atomic dB / dC sums (DBC_ATOMIC "auto", the
# finish kernel on by default): the selective-scan GPU tests (atomic path by default, the
# deterministic one in test_triton_gpu_finish_kernel), the errors vs float64, the per-kernel
# breakdown and the benchmark, atomics against the per-block partials ("noatomic").
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))s"; }
L=/tmp/logs; mkdir -p $L /tmp/mb && tar xzf .whl/mamba_ssm-*.tar.gz -C /tmp/mb
(MAX_JOBS=6 setsid nohup python3 .whl/build_mamba_cuda.py > $L/build.log 2>&1 &)
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
timeout 200 python3 -m pytest -q -rfE -m gpu -n 10 -p no:cacheprovider \
    tests/ops/selective_scan/test_selective_scan_triton.py tests/ops/selective_scan/test_triton_fwd_lane.py \
    -k "not float64" > $L/gpu_tests.log 2>&1
tail -4 $L/gpu_tests.log; el
timeout 90 python3 benchmarks/selective_scan/gpu_errors.py cuda lane > $L/errors.txt 2>&1; tail -4 $L/errors.txt; el
cd benchmarks/selective_scan
timeout 80 python3 profile_gpu.py --breakdown --shapes 8x4096x2048x16,16x1536x1024x16,1x1536x4096x16 \
    --dtypes bf16,fp32 --bwd-variants lane,lane-noatomic > $L/breakdown.txt 2>&1
grep -E "bwd=|_kernel" $L/breakdown.txt | cut -c1-90; el
for i in $(seq 1 40); do grep -q BUILD_OK $L/build.log && break; sleep 5; done
tail -1 $L/build.log
export PYTHONPATH=$PYTHONPATH:/tmp/mbuild
timeout 200 python3 bench_gpu.py --graph --bwd-variants lane,lane-noatomic --out $L/bench.json > $L/bench.log 2>&1
grep -v '^{' $L/bench.log | tail -36
tar czf $OUT/logs.tar.gz -C /tmp logs; el
