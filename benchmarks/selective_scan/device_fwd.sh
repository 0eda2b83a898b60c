#!/bin/bash
# One device call after a kernel change: mamba-ssm built in the background (.whl carried); GPU
# errors vs float64 in every dtype; the GPU tests (tests/ops, -m gpu, the dynamic compile case
# apart, under compile_dynamic_probe.py with stack dumps); then bench_gpu.py side by side with
# the library's split policy. Writes logs under $OUT. Run from the repository root.
T0=$(date +%s)
mkdir -p /tmp/mb && tar xzf .whl/mamba_ssm-*.tar.gz -C /tmp/mb
(MAX_JOBS=14 setsid nohup python3 .whl/build_mamba_cuda.py > $OUT/build.log 2>&1 &)
python3 setup.py build_ext --inplace -q > $OUT/setup.log 2>&1 || echo "C build failed (CPU kernels only)"
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)"
[ -z "$SKIP_ERR" ] && timeout ${T_ERR:-150} python3 benchmarks/selective_scan/gpu_errors.py 2>&1 | tee $OUT/gpu_errors.log | tail -3
echo "t=$(( $(date +%s) - T0 ))s"
timeout ${T_TEST:-240} python3 -m pytest -q -rfE -m gpu -p no:cacheprovider -k "${TEST_K:-not dynamic}" tests/ops 2>&1 | tee $OUT/pytest_gpu.log | tail -6
echo "t=$(( $(date +%s) - T0 ))s"
TORCH_LOGS=${DYN_LOGS:-dynamic} timeout ${T_DYN:-150} python3 benchmarks/selective_scan/compile_dynamic_probe.py --every 45 > $OUT/compile_dynamic.log 2>&1
echo "dynamic compile rc=$?"; grep -v "^  File\|^    " $OUT/compile_dynamic.log | tail -4
echo "t=$(( $(date +%s) - T0 ))s"
for i in $(seq 1 60); do grep -q BUILD_OK $OUT/build.log && break; sleep 5; done
tail -1 $OUT/build.log
PYTHONPATH=$PYTHONPATH:/tmp/mbuild timeout ${T_BENCH:-200} python3 benchmarks/selective_scan/bench_gpu.py --targets=${TARGETS:--1} --out $OUT/bench.json 2>&1 | tee $OUT/bench.log | grep -v '^{' | tail -20
echo "t=$(( $(date +%s) - T0 ))s"
