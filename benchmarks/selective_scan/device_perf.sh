#!/bin/bash
# One device call for speed: mamba-ssm's kernel built in the background (.whl carried), GPU errors
# of the current kernels while it builds, then bench_gpu.py side by side for each forward variant.
# VARIANTS (default "tile column"), TARGETS (default 0,2112). Writes under $OUT.
T0=$(date +%s)
mkdir -p /tmp/mb && tar xzf .whl/mamba_ssm-*.tar.gz -C /tmp/mb
(MAX_JOBS=14 setsid nohup python3 .whl/build_mamba_cuda.py > $OUT/build.log 2>&1 &)
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
timeout ${T_ERR:-150} python3 benchmarks/selective_scan/gpu_errors.py 2>&1 | tee $OUT/gpu_errors.log | tail -3
timeout 120 python3 -X faulthandler benchmarks/selective_scan/aoti_probe.py same:plain /tmp > $OUT/aoti_same.log 2>&1; echo "aoti same-process rc=$?"; tail -2 $OUT/aoti_same.log
echo "t=$(( $(date +%s) - T0 ))s"
for i in $(seq 1 60); do grep -q BUILD_OK $OUT/build.log && break; sleep 5; done
tail -1 $OUT/build.log
for v in ${VARIANTS:-tile column}; do
  echo "== FWD_VARIANT $v, t=$(( $(date +%s) - T0 ))s"
  PYTHONPATH=$PYTHONPATH:/tmp/mbuild FWD_VARIANT=$v timeout ${T_BENCH:-200} python3 -c "
import sys; sys.path.insert(0, 'benchmarks/selective_scan')
import os, bench_gpu; from ssmscan.ops.selective_scan import triton_fwd
triton_fwd.FWD_VARIANT = os.environ['FWD_VARIANT']
sys.argv = ['bench_gpu.py', '--targets', '${TARGETS:-0,2112}', '--out', '$OUT/bench_$v.json']
bench_gpu.main()" 2>&1 | tee $OUT/bench_$v.log | grep -v '^{' | tail -22
done
echo "t=$(( $(date +%s) - T0 ))s"
