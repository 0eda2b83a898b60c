#!/bin/bash
# One device call: mamba-ssm built in the background (.whl carried); GPU errors vs float64 for each
# backward variant (BWD_VARIANTS, default "tile_rs tile"); then bench_gpu.py side by side with the
# library's split policy for every variant in BENCH_VARIANTS (default "tile_rs tile").
T0=$(date +%s)
mkdir -p /tmp/mb && tar xzf .whl/mamba_ssm-*.tar.gz -C /tmp/mb
(MAX_JOBS=14 setsid nohup python3 .whl/build_mamba_cuda.py > $OUT/build.log 2>&1 &)
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
for bv in ${BWD_VARIANTS:-tile_rs tile}; do
  echo "== errors BWD_VARIANT $bv t=$(( $(date +%s) - T0 ))s"
  BWD_VARIANT=$bv timeout ${T_ERR:-120} python3 -c "
import sys, os; sys.path.insert(0, 'benchmarks/selective_scan')
from ssmscan.ops.selective_scan import triton_bwd
triton_bwd.BWD_VARIANT = os.environ['BWD_VARIANT']
import gpu_errors; gpu_errors.main()" 2>&1 | tee $OUT/errors_$bv.log | tail -3
done
for i in $(seq 1 60); do grep -q BUILD_OK $OUT/build.log && break; sleep 5; done
tail -1 $OUT/build.log
for bv in ${BENCH_VARIANTS:-tile_rs tile}; do
  echo "== bench BWD_VARIANT $bv t=$(( $(date +%s) - T0 ))s"
  PYTHONPATH=$PYTHONPATH:/tmp/mbuild BWD_VARIANT=$bv timeout ${T_BENCH:-150} python3 -c "
import sys, os; sys.path.insert(0, 'benchmarks/selective_scan')
import bench_gpu; from ssmscan.ops.selective_scan import triton_bwd
triton_bwd.BWD_VARIANT = os.environ['BWD_VARIANT']
sys.argv = ['bench_gpu.py', '--targets', '-1', '--out', '$OUT/bench_bwd_$bv.json']
bench_gpu.main()" 2>&1 | tee $OUT/bench_$bv.log | grep -v '^{' | tail -10
done
echo "t=$(( $(date +%s) - T0 ))s"
