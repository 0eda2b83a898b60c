#!/bin/bash
# One device call (sixth session, second): the GPU tests the first call's time limit cut (two
# processes, during the mamba-ssm build), then the side-by-side benchmark with the lane
# kernels' B / C steps rounded to 16 (the default) and to 8 (``triton_fwd_lane.LP_ALIGN``).
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))s"; }
mkdir -p /tmp/mb && tar xzf .whl/mamba_ssm-*.tar.gz -C /tmp/mb
(MAX_JOBS=12 setsid nohup python3 .whl/build_mamba_cuda.py > $OUT/build.log 2>&1 &)
(python3 setup.py build_ext --inplace -q > $OUT/setup.log 2>&1 &)
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
P="python3 -m pytest -q -rfE -m gpu -p no:cacheprovider"
S=tests/ops/selective_scan
timeout ${T_TEST:-270} $P $S/test_selective_scan_triton.py -k "test_triton_gpu and not split and not cache and not float64" \
    > $OUT/pytest_a.log 2>&1 &
PA=$!
timeout ${T_TEST:-270} $P $S/test_triton_fwd_lane.py $S/test_selective_scan_triton.py tests/ops/linear_scan \
    tests/ops/selective_state_update -k "lane or cache or float64 or compile or linear or state_update" \
    > $OUT/pytest_b.log 2>&1 &
PB=$!
wait $PA $PB
pkill -f compile_worker; sleep 1
tail -4 $OUT/pytest_a.log; tail -8 $OUT/pytest_b.log; el
for i in $(seq 1 60); do grep -q BUILD_OK $OUT/build.log && break; sleep 5; done
tail -1 $OUT/build.log
export PYTHONPATH=$PYTHONPATH:/tmp/mbuild
cd benchmarks/selective_scan
for a in 16 8; do
  timeout 120 python3 -c "
import sys, runpy
from ssmscan.ops.selective_scan import triton_fwd_lane
triton_fwd_lane.LP_ALIGN = $a
sys.argv = ['bench_gpu.py', '--graph', '--out', '$OUT/bench_lp$a.json']
runpy.run_path('bench_gpu.py', run_name='__main__')
" 2>&1 | tee $OUT/bench_lp$a.log | grep -v '^{' | tail -22
  el
done
