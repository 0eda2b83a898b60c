#!/bin/bash
# Twenty-sixth session, call 2: where the time-lane chain's time goes. Timing probes (wrong
# results, --no-check): CHAIN=0 every tile from h_in (no flags), CHAIN=2 publish without looking
# back; register caps; Nsight Compute on the chain kernel.
source benchmarks/selective_scan/device_lib.sh
cd benchmarks/selective_scan
CH="triton_fwd.FWD_TIME_LANES=1,triton_fwd.TLANE_CHAIN=1,triton_fwd.TLANE_BC16=1"
V="base;$CH;$CH,TLANE.CHAIN=0;$CH,TLANE.CHAIN=2;$CH,TLANE.maxnreg=96;$CH,TLANE.maxnreg=80"
timeout 150 python3 fwd_knob_sweep.py --rounds 3 --shapes 1x1536x4096x16 --dtypes bf16 --no-check \
    --variants "$V" 2>&1 | tee $L/sweep.log | grep -E " ms|Error|rror"
el
SECS="--section LaunchStats --section Occupancy --section WarpStateStats --section SourceCounters \
 --section SchedulerStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section SpeedOfLight --section InstructionStats"
for c in 1 0; do
  timeout 100 ncu --clock-control none -k regex:_selective_scan_fwd_tchain -c 1 $SECS --import-source no \
    -f -o /tmp/ncu_c$c python3 -c "
import sys; sys.argv=['profile_gpu.py','--once','--fwd','--shapes','1x1536x4096x16','--dtypes','bf16','--time-lanes','1']
from ssmscan.ops.selective_scan import triton_fwd
triton_fwd.TLANE_CHAIN=True; triton_fwd.TLANE_BC16=True; triton_fwd.TLANE_OPTIONS={'CHAIN': $c}
import runpy; runpy.run_path('profile_gpu.py', run_name='__main__')" > $L/ncu_c$c.log 2>&1
  tail -1 $L/ncu_c$c.log
  ncu --import /tmp/ncu_c$c.ncu-rep --page details > $OUT/ncu_c$c.txt 2>&1
  ncu --import /tmp/ncu_c$c.ncu-rep --page source --csv --print-source sass > $OUT/ncu_src_c$c.csv 2>&1
  grep -E "^    Duration|Registers Per Thread|Achieved Occupancy|Theoretical Occ|Issue Slots Busy|Warp Cycles Per Issued|Eligible Warps|L1/TEX Hit|Executed Instructions  " $OUT/ncu_c$c.txt | head -12
  el
done
