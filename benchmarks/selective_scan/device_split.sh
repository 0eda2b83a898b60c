#!/bin/bash
# One device call for the "split" backward (Note [selective scan backward split]), not yet the
# default: mamba-ssm built in the background (.whl carried); the GPU tests of the split kernel;
# its errors vs float64 in every dtype; then bench_gpu.py with tile_rs and split side by side
# (and CUDA graphs). Run from the repository root; logs under $OUT.
T0=$(date +%s)
mkdir -p /tmp/mb && tar xzf .whl/mamba_ssm-*.tar.gz -C /tmp/mb
(MAX_JOBS=14 setsid nohup python3 .whl/build_mamba_cuda.py > $OUT/build.log 2>&1 &)
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout ${T_TEST:-200} python3 -m pytest -q -rfE -m gpu -p no:cacheprovider -k "split" \
    tests/ops/selective_scan/test_selective_scan_triton.py 2>&1 | tee $OUT/pytest_split.log | tail -4
echo "t=$(( $(date +%s) - T0 ))s"
timeout ${T_ERR:-150} python3 benchmarks/selective_scan/gpu_errors.py cuda split 2>&1 | tee $OUT/gpu_errors_split.log | tail -3
echo "t=$(( $(date +%s) - T0 ))s"
for i in $(seq 1 60); do grep -q BUILD_OK $OUT/build.log && break; sleep 5; done
tail -1 $OUT/build.log
PYTHONPATH=$PYTHONPATH:/tmp/mbuild timeout ${T_BENCH:-300} python3 benchmarks/selective_scan/bench_gpu.py \
    --bwd-variants=tile_rs,split --graph ${SHAPES:+--shapes $SHAPES} --out $OUT/bench_split.json 2>&1 \
    | tee $OUT/bench_split.log | grep -v '^{' | tail -40
echo "t=$(( $(date +%s) - T0 ))s"
