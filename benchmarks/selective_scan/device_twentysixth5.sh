#!/bin/bash
# Twenty-sixth session, call 5: the finer local pass (LANE_LOCAL_FINE 2) with the two-channel
# real pass's fold loading several segments at a time for both halves (LANE_FOLD_GROUP), timed
# beside the library's forward under CUDA graphs, every variant checked first; the kernels'
# durations in Nsight Compute.
source benchmarks/selective_scan/device_lib.sh
cd benchmarks/selective_scan
F=triton_fwd.LANE_LOCAL_FINE; G=triton_fwd.LANE_FOLD_GROUP
V="base;$F=2;$F=2,$G=4;$F=2,$G=8;$F=2,$G=16;$G=4;$G=8"
timeout 200 python3 fwd_knob_sweep.py --rounds 5 --shapes 1x1536x4096x16 --dtypes bf16,fp32 \
    --variants "$V" 2>&1 | tee $L/sweep.log | grep -E " ms|Error|rror"
el
timeout 150 python3 fwd_knob_sweep.py --rounds 3 --shapes 1x1024x65536x16,16x1536x1024x16,8x4096x2048x16 \
    --dtypes bf16,fp32 --variants "base;$F=2,$G=8;$G=8" 2>&1 | tee $L/sweep2.log | grep -E " ms|Error|rror"
el
SECS="--section LaunchStats --section Occupancy --section SpeedOfLight"
for cfg in "1:0" "2:8"; do
  IFS=: read f g <<< "$cfg"
  timeout 100 ncu --clock-control none -k regex:_selective_scan_fwd_lane -c 2 $SECS \
    -f -o /tmp/ncu_$f$g python3 -c "
import sys; sys.argv=['profile_gpu.py','--once','--fwd','--shapes','1x1536x4096x16','--dtypes','bf16']
from ssmscan.ops.selective_scan import triton_fwd
triton_fwd.LANE_LOCAL_FINE=$f; triton_fwd.LANE_FOLD_GROUP=$g
import runpy; runpy.run_path('profile_gpu.py', run_name='__main__')" > $L/ncu_$f$g.log 2>&1
  ncu --import /tmp/ncu_$f$g.ncu-rep --page details > $OUT/ncu_$f$g.txt 2>&1
  grep -E "^  _selective|^    Duration|Registers Per Thread|Achieved Occupancy" $OUT/ncu_$f$g.txt | head -12
  el
done
