#!/bin/bash
# One device call (2026-12-01, seventh session): the lane backward with the next tile's inputs
# prefetched (triton_bwd_lane.PREFETCH) and the segments' lane local pass (triton_bwd.LANE_LOCAL):
# GPU tests of the split path (split and lane, segments and not) and gpu_errors.py while mamba-ssm
# builds; the per-kernel breakdown (profile_gpu.py) with the A/B variants; the side-by-side
# benchmark. Everything but the benchmark's tables goes to $OUT/logs.tar.gz (few files come back).
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))s"; }
L=/tmp/logs; mkdir -p $L /tmp/mb && tar xzf .whl/mamba_ssm-*.tar.gz -C /tmp/mb
(MAX_JOBS=12 setsid nohup python3 .whl/build_mamba_cuda.py > $L/build.log 2>&1 &)
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
timeout 170 python3 -m pytest -q -rfE -m gpu -p no:cacheprovider \
    tests/ops/selective_scan/test_selective_scan_triton.py -k "split_backward and not fp16" > $L/pytest.log 2>&1 &
PT=$!
timeout 120 python3 benchmarks/selective_scan/gpu_errors.py cuda lane > $L/gpu_errors.log 2>&1
wait $PT
tail -3 $L/gpu_errors.log; tail -4 $L/pytest.log; el
cd benchmarks/selective_scan
timeout 120 python3 profile_gpu.py --breakdown --shapes 8x4096x2048x16,16x1536x1024x16,1x1024x65536x16,1x1536x4096x16 \
    --dtypes bf16,fp32 --bwd-variants lane,lane-noprefetch,split,split-2dlocal > $L/breakdown.txt 2>&1
el
grep -E "bwd=|_selective_scan_bwd_(lane|split|local|lane_local)_kernel" $L/breakdown.txt | head -80
for i in $(seq 1 60); do grep -q BUILD_OK $L/build.log && break; sleep 5; done
tail -1 $L/build.log
export PYTHONPATH=$PYTHONPATH:/tmp/mbuild
timeout 230 python3 bench_gpu.py --graph --bwd-variants lane,split --out $L/bench.json > $L/bench.log 2>&1
grep -v '^{' $L/bench.log | tail -32
tar czf $OUT/logs.tar.gz -C /tmp logs; el
