#!/bin/bash
# Written in the tenth session (no device was lent then), for the next device session: recorded
# eager launch plans (Note [eager launch plans]) and the time-lane forward (Note [selective scan
# forward time lanes]), both off by default until this has run. Two calls on one warm machine:
#   bash benchmarks/selective_scan/device_tenth1.sh a   # starts the mamba-ssm build; the plan
#       and time-lane tests, every GPU test, host time with plans off / on (plan_host.py)
#   bash benchmarks/selective_scan/device_tenth1.sh b   # waits for the build; the benchmark with
#       mamba-ssm side by side, plans on, then the batch-1 shapes with the time-lane forward
PART=${1:-a}
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))s"; }
B=/tmp/blog; mkdir -p $B
L=${OUT:-/tmp}/logs_$PART; mkdir -p $L   # under $OUT: comes back even if the call times out
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
if [ "$PART" = a ]; then
  mkdir -p /tmp/mb && tar xzf .whl/mamba_ssm-*.tar.gz -C /tmp/mb
  (MAX_JOBS=8 setsid nohup python3 .whl/build_mamba_cuda.py > $B/build.log 2>&1 &)
  timeout 120 python3 -m pytest -q -rfE -p no:cacheprovider tests/ops/common/test_launch_plan.py \
      tests/ops/selective_scan/test_triton_fwd_tlane.py > $L/plan_tests.log 2>&1
  tail -3 $L/plan_tests.log; el
  # replayed launches take int pointers (no driver check): a wrong offset would be a bad address
  if command -v compute-sanitizer > /dev/null; then
    timeout 150 compute-sanitizer --tool memcheck python3 -m pytest -q -p no:cacheprovider \
        tests/ops/common/test_launch_plan.py -k gpu > $L/sanitizer.log 2>&1
    grep -E "ERROR SUMMARY|passed|failed" $L/sanitizer.log | tail -3
  fi
  el
  timeout 220 python3 -m pytest -q -rfE -m gpu -n 8 -p no:cacheprovider tests/ -k "not float64" \
      > $L/gpu_tests.log 2>&1
  grep -E "^FAILED|^ERROR|passed|failed" $L/gpu_tests.log | tail -8
  el
  cd benchmarks/selective_scan
  for s in "1 1536 4096 16 --dtype bf16" "1 1536 4096 16 --dtype fp32" "16 1536 1024 16 --dtype bf16"; do
    timeout 40 python3 plan_host.py $s; done > $L/plan_host.log 2>&1
  cut -c1-400 $L/plan_host.log
else
  cd benchmarks/selective_scan
  for i in $(seq 1 60); do grep -q BUILD_OK $B/build.log && break; sleep 5; done
  cp $B/build.log $L/; tail -1 $B/build.log; el
  export PYTHONPATH=$PYTHONPATH:/tmp/mbuild
  timeout 250 python3 bench_gpu.py --graph --api --plans --out $L/bench.json > $L/bench.log 2>&1
  grep -v '^{' $L/bench.log | tail -34
  timeout 200 python3 bench_gpu.py --graph --plans --fwd-variants lane,tlane \
      --shapes 1x1536x4096x16,1x1024x65536x16 --out $L/bench_tlane.json > $L/bench_tlane.log 2>&1
  grep -v '^{' $L/bench_tlane.log | tail -20
fi
el
