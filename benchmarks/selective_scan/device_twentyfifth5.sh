#!/bin/bash
# Twenty-fifth session, call 5: Nsight Compute on the library's batch-1 split forward as it now
# stands (two-channel real pass, fp32 rows at this shape): per-instruction stall samples of the
# local and the real pass at (1, 1536, 4096) bf16, to find loads whose consumers wait.
source benchmarks/selective_scan/device_lib.sh
cd benchmarks/selective_scan
SECS="--section LaunchStats --section Occupancy --section WarpStateStats --section SourceCounters \
 --section SchedulerStats --section ComputeWorkloadAnalysis --section SpeedOfLight"
timeout 150 ncu --clock-control none -k regex:_selective_scan_fwd -c 2 $SECS --import-source no \
  -f -o /tmp/ncu_split python3 profile_gpu.py --once --fwd --shapes 1x1536x4096x16 --dtypes bf16 \
  > $L/ncu_split.log 2>&1
tail -2 $L/ncu_split.log
ncu --import /tmp/ncu_split.ncu-rep --page details > $OUT/ncu_split.txt 2>&1
ncu --import /tmp/ncu_split.ncu-rep --page source --csv --print-source sass > $OUT/ncu_src_split.csv 2>&1
grep -E "_selective_scan_fwd|^    Duration|Registers Per Thread|Issue Slots Busy|Warp Cycles Per Issued|Eligible Warps" $OUT/ncu_split.txt | head -20
el
