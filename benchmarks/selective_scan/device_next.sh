#!/bin/bash
# One device call prepared for the next session (written 2026-12-01 after the GPU time ran out):
# the lane backward's first GPU run (BWD_VARIANT "lane", Note [selective scan backward lanes]):
# the split-backward GPU tests for both variants (the fixture asserts no layout fallback) and
# gpu_errors.py for "lane", while mamba-ssm builds (.whl carried); then the side-by-side benchmark
# with both backward variants and checkpoint lengths 256 / 128 (batch 1: 16 -> 32 L-segments).
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))s"; }
mkdir -p /tmp/mb && tar xzf .whl/mamba_ssm-*.tar.gz -C /tmp/mb
(MAX_JOBS=12 setsid nohup python3 .whl/build_mamba_cuda.py > $OUT/build.log 2>&1 &)
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
timeout 200 python3 -m pytest -q -rfE -m gpu -p no:cacheprovider \
    tests/ops/selective_scan/test_selective_scan_triton.py -k split_backward > $OUT/pytest.log 2>&1 &
PT=$!
timeout 150 python3 benchmarks/selective_scan/gpu_errors.py cuda lane > $OUT/gpu_errors.log 2>&1
wait $PT
tail -4 $OUT/gpu_errors.log; tail -6 $OUT/pytest.log; el
for i in $(seq 1 60); do grep -q BUILD_OK $OUT/build.log && break; sleep 5; done
tail -1 $OUT/build.log
export PYTHONPATH=$PYTHONPATH:/tmp/mbuild
cd benchmarks/selective_scan
timeout 240 python3 bench_gpu.py --graph --bwd-variants split,lane --ck 256,128 --out $OUT/bench.json \
    2>&1 | tee $OUT/bench.log | grep -v '^{' | tail -40
el
