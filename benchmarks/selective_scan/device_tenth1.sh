#!/bin/bash
# Tenth session, first device call: recorded eager launch plans (Note [eager launch plans]).
# The plan tests and every GPU test; host time with plans off / on (plan_host.py) at batch 1
# and 16x1536; the benchmark with mamba-ssm side by side, plans on (off by default until this call).
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))s"; }
L=/tmp/logs; mkdir -p $L /tmp/mb && tar xzf .whl/mamba_ssm-*.tar.gz -C /tmp/mb
(MAX_JOBS=8 setsid nohup python3 .whl/build_mamba_cuda.py > $L/build.log 2>&1 &)
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
timeout 120 python3 -m pytest -q -rfE -x -p no:cacheprovider tests/ops/common/test_launch_plan.py \
    > $L/plan_tests.log 2>&1
tail -3 $L/plan_tests.log; el
timeout 240 python3 -m pytest -q -rfE -m gpu -n 8 -p no:cacheprovider tests/ -k "not float64" \
    > $L/gpu_tests.log 2>&1
grep -E "^FAILED|^ERROR|passed|failed" $L/gpu_tests.log | tail -8
el
cd benchmarks/selective_scan
for s in "1 1536 4096 16 --dtype bf16" "1 1536 4096 16 --dtype fp32" "16 1536 1024 16 --dtype bf16"; do
  timeout 100 python3 plan_host.py $s; done > $L/plan_host.log 2>&1
cat $L/plan_host.log | cut -c1-400
el
for i in $(seq 1 40); do grep -q BUILD_OK $L/build.log && break; sleep 5; done
tail -1 $L/build.log; el
export PYTHONPATH=$PYTHONPATH:/tmp/mbuild
timeout 220 python3 bench_gpu.py --graph --api --plans --out $L/bench.json > $L/bench.log 2>&1
grep -v '^{' $L/bench.log | tail -34
tar czf $OUT/logs.tar.gz -C /tmp logs; el
