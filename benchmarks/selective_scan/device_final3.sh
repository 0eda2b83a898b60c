#!/bin/bash
# The seventh session's last device call: the lane backward as the default (GPU tests, gpu_errors),
# the L1 prefetch of the next tile's B / C (lane-pbc) beside it kernel by kernel, then the
# side-by-side benchmark with both. Logs in $OUT/logs.tar.gz.
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))s"; }
L=/tmp/logs; mkdir -p $L /tmp/mb && tar xzf .whl/mamba_ssm-*.tar.gz -C /tmp/mb
(MAX_JOBS=12 setsid nohup python3 .whl/build_mamba_cuda.py > $L/build.log 2>&1 &)
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
timeout 140 python3 -m pytest -q -rfE -m gpu -p no:cacheprovider \
    tests/ops/selective_scan/test_selective_scan_triton.py -k "(split_backward and lane) or (test_triton_gpu and not split_backward and not fp16)" > $L/pytest.log 2>&1 &
PT=$!
timeout 110 python3 benchmarks/selective_scan/gpu_errors.py cuda lane > $L/gpu_errors.log 2>&1
wait $PT
tail -3 $L/gpu_errors.log; grep -c PASSED $L/pytest.log; grep -E "FAILED|ERROR" $L/pytest.log | head; tail -c 300 $L/pytest.log; el
cd benchmarks/selective_scan
timeout 70 python3 profile_gpu.py --breakdown --shapes 8x4096x2048x16,16x1536x1024x16 --dtypes bf16,fp32 \
    --bwd-variants lane,lane-pbc > $L/breakdown.txt 2>&1
grep -E "bwd=|_selective_scan_bwd_lane_kernel" $L/breakdown.txt; el
for i in $(seq 1 40); do grep -q BUILD_OK $L/build.log && break; sleep 5; done
tail -1 $L/build.log
export PYTHONPATH=$PYTHONPATH:/tmp/mbuild
timeout 230 python3 bench_gpu.py --graph --bwd-variants lane,lane-pbc --out $L/bench.json > $L/bench.log 2>&1
grep -v '^{' $L/bench.log | tail -36
tar czf $OUT/logs.tar.gz -C /tmp logs; el
