#!/bin/bash
# One device call for correctness and packaging (no timing of the selective scan): GPU tests,
# kernel errors vs float64 in every dtype, AOTInductor build + fresh-process load (background,
# with a native backtrace if it crashes), then the parallel-scan benchmark of issue 3 alone on the
# GPU. Writes logs under $OUT. Run from the repository root.
T0=$(date +%s)
python3 setup.py build_ext --inplace -q > $OUT/setup.log 2>&1 || echo "C build failed (CPU kernels only)"
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)"
mkdir -p /tmp/aoti
(
  timeout 240 python3 -X faulthandler benchmarks/selective_scan/aoti_check.py build /tmp/aoti > $OUT/aoti_build.log 2>&1
  echo "build rc=$?" >> $OUT/aoti_build.log
  (cd /tmp/aoti && mkdir -p x && cd x && unzip -o -q ../scan.pt2 && find . -name "*.cpp" -o -name "*.json" | head -20 > $OUT/aoti_files.txt; for f in $(find . -name "*.cpp" | head -3); do cp $f $OUT/; done) 2>/dev/null
  timeout 120 python3 -X faulthandler benchmarks/selective_scan/aoti_check.py load /tmp/aoti > $OUT/aoti_load.log 2>&1
  rc=$?; echo "load rc=$rc" >> $OUT/aoti_load.log
  if [ $rc -ne 0 ] && command -v gdb > /dev/null; then
    timeout 150 gdb -q -batch -ex run -ex bt -ex "info sharedlibrary" --args python3 benchmarks/selective_scan/aoti_check.py load /tmp/aoti > $OUT/aoti_gdb.log 2>&1
  fi
) &
AOTI=$!
timeout ${T_TEST:-220} python3 -m pytest -q -rfE -m gpu -p no:cacheprovider -k "not (test_triton_gpu and not float64)" tests/ops 2>&1 | tee $OUT/pytest_gpu.log | tail -15
echo "t=$(( $(date +%s) - T0 ))s"
timeout ${T_ERR:-170} python3 benchmarks/selective_scan/gpu_errors.py 2>&1 | tee $OUT/gpu_errors.log | tail -4
echo "t=$(( $(date +%s) - T0 ))s"
wait $AOTI
tail -4 $OUT/aoti_build.log; tail -6 $OUT/aoti_load.log; [ -f $OUT/aoti_gdb.log ] && grep -A25 "SIGSEGV" $OUT/aoti_gdb.log | head -40
echo "t=$(( $(date +%s) - T0 ))s"
timeout ${T_SCAN:-150} python3 benchmarks/scan/bench_parallel_scan.py --device cuda --shape 16 24576 1024 --compile 2>&1 | tee $OUT/scan_bench.log | tail -12
echo "t=$(( $(date +%s) - T0 ))s"
