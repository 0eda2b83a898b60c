#!/bin/bash
# Eighteenth session, call 5 (no mamba-ssm build): softplus as a degree-8 polynomial in
# y = exp(-|x|) (no MUFU.RCP) against the previous form (s = y / (2 + y) and its atanh series),
# forward only, CUDA graphs: the tree before the change (old_triton_common.py.txt, carried) and
# this one in alternating processes, twice; then the GPU tests of forward and backward.
source benchmarks/selective_scan/device_lib.sh
rm -rf /tmp/old && cp -r src /tmp/old && cp benchmarks/selective_scan/old_triton_common.py.txt \
    /tmp/old/ssmscan/ops/selective_scan/triton_common.py
cd benchmarks/selective_scan
for r in 1 2; do
  for t in old new; do
    P=$PWD/../../src; [ $t = old ] && P=/tmp/old
    PYTHONPATH=$P timeout 90 python3 fwd_knob_sweep.py --variants base --rounds 2 \
        --shapes 1x1536x4096x16,1x1024x65536x16,8x4096x2048x16,16x1536x1024x16 \
        --out $L/sp_${t}_$r.json > $L/sp_${t}_$r.log 2>&1
    echo "== $t round $r"; grep -E " base " $L/sp_${t}_$r.log | sed 's/(1.000 of the first)//'
  done
  el
done
cd ../..
gpu_tests 260 "tests/ops/selective_scan/test_selective_scan_triton.py::test_triton_gpu" \
    tests/ops/selective_scan/test_triton_fwd_lane.py tests/ops/selective_scan/test_eager_path.py \
    "tests/ops/selective_scan/test_selective_scan_triton.py::test_compile_fullgraph_training_step_gpu" \
    tests/ops/common/test_launch_plan.py; el
