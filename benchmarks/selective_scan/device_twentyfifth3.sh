#!/bin/bash
# Twenty-fifth session, call 3: the time-lane forward's loop unrolled (TLANE_UNROLL: two or four
# tiles an iteration, so that ptxas can overlap one tile's h-independent work with the other's
# scan), with 16-bit rows and the rows a tile ahead (BC_MODE 2); Nsight Compute on the best.
source benchmarks/selective_scan/device_lib.sh
cd benchmarks/selective_scan
TL="triton_fwd.FWD_TIME_LANES=1"
R16="triton_fwd.TLANE_BC16=1"
V="base;$TL,triton_fwd.TLANE_BC_MODE=2,$R16;$TL,triton_fwd.TLANE_BC_MODE=2,$R16,triton_fwd.TLANE_UNROLL=2"
V="$V;$TL,triton_fwd.TLANE_BC_MODE=1,$R16,triton_fwd.TLANE_UNROLL=2;$TL,triton_fwd.TLANE_BC_MODE=1,$R16,triton_fwd.TLANE_UNROLL=4"
V="$V;$TL,triton_fwd.TLANE_BC_MODE=1,triton_fwd.TLANE_UNROLL=2;$TL,triton_fwd.TLANE_BC_MODE=0,$R16,triton_fwd.TLANE_UNROLL=2"
timeout 200 python3 fwd_knob_sweep.py --rounds 3 --shapes 1x1536x4096x16 --dtypes bf16,fp32 \
    --variants "$V" 2>&1 | tee $L/sweep.log | grep -E " ms|Error|rror"
el
SECS="--section LaunchStats --section Occupancy --section WarpStateStats --section SourceCounters \
 --section SchedulerStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section SpeedOfLight"
for cfg in "bc2r16:2:1" "bc2r16u2:2:2"; do
  IFS=: read name bc un <<< "$cfg"
  timeout 100 ncu --clock-control none -k regex:_selective_scan_fwd_tlane -c 1 $SECS --import-source no \
    -f -o /tmp/ncu_$name python3 -c "
import sys; sys.argv=['profile_gpu.py','--once','--fwd','--shapes','1x1536x4096x16','--dtypes','bf16','--time-lanes','$bc']
from ssmscan.ops.selective_scan import triton_fwd
triton_fwd.TLANE_BC16=True; triton_fwd.TLANE_UNROLL=$un
import runpy; runpy.run_path('profile_gpu.py', run_name='__main__')" > $L/ncu_$name.log 2>&1
  tail -1 $L/ncu_$name.log
  ncu --import /tmp/ncu_$name.ncu-rep --page details > $OUT/ncu_$name.txt 2>&1
  ncu --import /tmp/ncu_$name.ncu-rep --page source --csv --print-source sass > $OUT/ncu_src_$name.csv 2>&1
  grep -E "^    Duration|Registers Per Thread|Issue Slots Busy|Warp Cycles Per Issued|Eligible Warps|L1/TEX Hit" $OUT/ncu_$name.txt | head -12
  el
done
