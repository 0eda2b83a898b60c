#!/bin/bash
# Eighth session, call 1: device_next.sh (the finish kernel) plus a forward-only breakdown and
# the host overhead (host_overhead.py, mamba-ssm built).
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))s"; }
L=/tmp/logs; mkdir -p $L /tmp/mb && tar xzf .whl/mamba_ssm-*.tar.gz -C /tmp/mb
(MAX_JOBS=12 setsid nohup python3 .whl/build_mamba_cuda.py > $L/build.log 2>&1 &)
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
timeout 150 python3 -m pytest -q -rfE -m gpu -n 8 -p no:cacheprovider \
    tests/ops/selective_scan/test_selective_scan_triton.py -k "finish_kernel or (split_backward and lane and segments)" \
    > $L/pytest.log 2>&1
tail -3 $L/pytest.log; el
cd benchmarks/selective_scan
timeout 90 python3 profile_gpu.py --breakdown --shapes 8x4096x2048x16,16x1536x1024x16,1x1536x4096x16 \
    --dtypes bf16,fp32 --bwd-variants lane,lane-finish > $L/breakdown.txt 2>&1
grep -E "bwd=|reduce_kernel|sum_partials|elementwise" $L/breakdown.txt; el
for i in $(seq 1 40); do grep -q BUILD_OK $L/build.log && break; sleep 5; done
tail -1 $L/build.log
export PYTHONPATH=$PYTHONPATH:/tmp/mbuild
timeout 230 python3 bench_gpu.py --graph --bwd-variants lane,lane-finish --out $L/bench.json > $L/bench.log 2>&1
grep -v '^{' $L/bench.log | tail -36
timeout 60 python3 profile_gpu.py --breakdown --fwd --dtypes bf16,fp32 > $L/fwd_breakdown.txt 2>&1; el
timeout 120 python3 host_overhead.py > $L/host.txt 2>&1; cat $L/host.txt; el
tar czf $OUT/logs.tar.gz -C /tmp logs; el
