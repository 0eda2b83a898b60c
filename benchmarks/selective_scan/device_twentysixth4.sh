#!/bin/bash
# Twenty-sixth session, call 4: the local pass in finer segments than the real pass
# (LANE_LOCAL_FINE: FOLD local segments per real one), at the library's segments and at 8 / 10,
# timed beside the library's forward under CUDA graphs, every variant checked first.
source benchmarks/selective_scan/device_lib.sh
cd benchmarks/selective_scan
F=triton_fwd.LANE_LOCAL_FINE; S=triton_fwd.LANE_SEGMENTS
V="base;$F=2;$F=4;$S=8;$S=8,$F=2;$S=8,$F=4;$S=8,$F=8;$S=10,$F=2;$S=10,$F=4"
timeout 220 python3 fwd_knob_sweep.py --rounds 3 --shapes 1x1536x4096x16 --dtypes bf16,fp32 \
    --variants "$V" 2>&1 | tee $L/sweep.log | grep -E " ms|Error|rror"
el
timeout 120 python3 fwd_knob_sweep.py --rounds 3 --shapes 1x1024x65536x16,16x1536x1024x16 --dtypes bf16 \
    --variants "base;$F=2;$F=4" 2>&1 | tee $L/sweep2.log | grep -E " ms|Error|rror"
el
SECS="--section LaunchStats --section Occupancy --section WarpStateStats --section SchedulerStats --section SpeedOfLight"
for f in 1 2; do
  timeout 100 ncu --clock-control none -k regex:_selective_scan_fwd_lane -c 2 $SECS \
    -f -o /tmp/ncu_f$f python3 -c "
import sys; sys.argv=['profile_gpu.py','--once','--fwd','--shapes','1x1536x4096x16','--dtypes','bf16']
from ssmscan.ops.selective_scan import triton_fwd
triton_fwd.LANE_LOCAL_FINE=$f
import runpy; runpy.run_path('profile_gpu.py', run_name='__main__')" > $L/ncu_f$f.log 2>&1
  tail -1 $L/ncu_f$f.log
  ncu --import /tmp/ncu_f$f.ncu-rep --page details > $OUT/ncu_f$f.txt 2>&1
  grep -E "^  _selective|^    Duration|Grid Size|Registers Per Thread|Achieved Occupancy|Theoretical Occ|Waves Per SM|Issue Slots Busy|Eligible Warps" $OUT/ncu_f$f.txt | head -20
  el
done
