#!/bin/bash
# Twenty-sixth session, call 6 (carry .whl): the library with the finer local pass and the
# paired fold as defaults (LANE_LOCAL_FINE 2, LANE_FOLD_GROUP 8): the GPU tests of the forward
# (segments, two channels, 16-bit rows, the test grid) while mamba-ssm's kernel builds, then the
# side-by-side benchmark (forward and forward + backward, eager and CUDA graphs).
source benchmarks/selective_scan/device_lib.sh
mkdir -p /tmp/mb && tar xzf .whl/mamba_ssm-*.tar.gz -C /tmp/mb
(MAX_JOBS=14 setsid nohup python3 .whl/build_mamba_cuda.py > /tmp/build.log 2>&1 &)
timeout 170 python3 -m pytest -q -rfE -m gpu -n 6 -p no:cacheprovider \
    tests/ops/selective_scan/test_selective_scan_triton.py \
    -k "segments and not float64" \
    > $L/gpu_tests.log 2>&1
grep -E "^FAILED|^ERROR|passed|failed" $L/gpu_tests.log | tail -8; head -c 600 $L/gpu_tests.log
el
wait_mamba_build 200
el
cd benchmarks/selective_scan
timeout 230 python3 bench_gpu.py --graph --out $L/bench.json > $L/bench.log 2>&1
grep -v '^{' $L/bench.log | tail -40
el
