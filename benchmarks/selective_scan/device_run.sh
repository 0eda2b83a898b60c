#!/bin/bash
# One device call: build mamba-ssm in the background, install ssmscan, run the GPU tests (kernels
# vs float64, compile training step), the AOTInductor check (load in a fresh process), the
# side-by-side benchmark once mamba-ssm is built, and the parallel-scan benchmark. Writes under $OUT.
# Run from the repository root with .whl carried (mamba-ssm sdist + build_mamba_cuda.py).
set -x
T0=$(date +%s)
mkdir -p /tmp/mb && tar xzf .whl/mamba_ssm-*.tar.gz -C /tmp/mb
(MAX_JOBS=14 setsid nohup python3 .whl/build_mamba_cuda.py > $OUT/build.log 2>&1 &)
python3 setup.py build_ext --inplace -q > $OUT/setup.log 2>&1 || echo "C build failed (CPU kernels only)"
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())"
timeout ${T_TEST:-150} python3 -m pytest -q -rfE -m "gpu" -p no:cacheprovider tests/ops/selective_scan/test_selective_scan_triton.py tests/ops/linear_scan/test_linear_scan_triton.py tests/ops/selective_state_update 2>&1 | tee $OUT/pytest_gpu.log | tail -25
timeout 60 python3 benchmarks/selective_scan/gpu_errors.py 2>&1 | tee $OUT/gpu_errors.log | tail -4
echo "t=$(( $(date +%s) - T0 ))s"
mkdir -p /tmp/aoti && timeout 120 python3 benchmarks/selective_scan/aoti_check.py build /tmp/aoti > $OUT/aoti.log 2>&1; echo "aoti build rc=$?"; tail -3 $OUT/aoti.log
( time timeout 90 python3 benchmarks/selective_scan/aoti_check.py load /tmp/aoti ) >> $OUT/aoti.log 2>&1; echo "aoti load rc=$?"; tail -6 $OUT/aoti.log
echo "t=$(( $(date +%s) - T0 ))s"
for i in $(seq 1 60); do grep -q BUILD_OK $OUT/build.log && break; sleep 5; done
tail -2 $OUT/build.log
PYTHONPATH=$PYTHONPATH:/tmp/mbuild timeout ${T_BENCH:-200} python3 benchmarks/selective_scan/bench_gpu.py --out $OUT/bench.json --ck 256 --targets ${TARGETS:-0,1320,5280} 2>&1 | tee $OUT/bench.log | grep -v '^{' | tail -30
echo "t=$(( $(date +%s) - T0 ))s"
timeout ${T_SCAN:-80} python3 benchmarks/scan/bench_parallel_scan.py --device cuda --shape 16 24576 1024 --compile > $OUT/scan_bench.log 2>&1; echo "scan rc=$?"; tail -15 $OUT/scan_bench.log
echo "t=$(( $(date +%s) - T0 ))s"
