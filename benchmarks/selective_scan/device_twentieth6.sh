#!/bin/bash
# Twentieth session, call 6: Nsight Compute on the library's batch-1 forward as it now stands
# (rolled B / C rows, one-asm broadcasts, the reciprocal-free softplus, 22 tile-segments): warp
# states, scheduler statistics and per-instruction stall samples of the local and the real pass
# at (1, 1536, 4096) bf16 (the last such profile, the seventeenth session's, predates all three).
source benchmarks/selective_scan/device_lib.sh
cd benchmarks/selective_scan
SECS="--section LaunchStats --section Occupancy --section WarpStateStats --section SourceCounters \
 --section SchedulerStats --section ComputeWorkloadAnalysis"
timeout 150 ncu --clock-control none -k regex:_selective_scan_fwd -c 2 $SECS --import-source no \
  -f -o /tmp/ncu_base python3 profile_gpu.py --once --fwd --shapes 1x1536x4096x16 --dtypes bf16 \
  > $L/ncu_base.log 2>&1
tail -2 $L/ncu_base.log
ncu --import /tmp/ncu_base.ncu-rep --page details > $OUT/ncu_base.txt 2>&1
ncu --import /tmp/ncu_base.ncu-rep --page source --csv --print-source sass > $OUT/ncu_src_base.csv 2>&1
grep -E "_selective_scan_fwd|^    Duration|Registers Per Thread|Achieved Occupancy|Issue Slots Busy|Warp Cycles Per Issued|Eligible Warps|No Eligible|Stall" $OUT/ncu_base.txt | head -40
el
