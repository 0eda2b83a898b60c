#!/bin/bash
# Sixteenth session, call 5 (the last of the device time; no mamba-ssm build): the lane forward
# loading u, delta, z two tiles ahead (triton_fwd.LANE_AHEAD = 2): its GPU tests, then ours only,
# CUDA graphs, at every benchmark shape, one tile ahead against two.
source benchmarks/selective_scan/device_lib.sh
timeout 100 python3 -m pytest -q -rfE -m gpu -n 4 -p no:cacheprovider \
    tests/ops/selective_scan/test_selective_scan_triton.py -k two_tiles_ahead > "$L/gpu_tests.log" 2>&1
grep -E "^FAILED|^ERROR|passed|failed" "$L/gpu_tests.log" | tail -5; el
cd benchmarks/selective_scan
timeout 130 python3 bench_gpu.py --graph --fwd-variants lane,lane-a2 --out $L/bench.json > $L/bench.log 2>&1
grep -v '^{' $L/bench.log | tail -20; el
