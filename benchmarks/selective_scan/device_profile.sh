#!/bin/bash
# One device call: where the time goes (2026-12-01, seventh session). torch.profiler's per-kernel
# breakdown of forward+backward (split and lane backward), then Nsight Compute on the forward,
# states and main backward kernels (warp stall reasons, issue rate, occupancy, per-instruction
# source counters) at (8, 4096, 2048, 16) and (16, 1536, 1024, 16) bf16. No mamba-ssm needed.
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))s"; }
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
cd benchmarks/selective_scan
timeout 150 python3 profile_gpu.py --breakdown --shapes 8x4096x2048x16,16x1536x1024x16,1x1024x65536x16 \
    > $OUT/breakdown.txt 2>&1
el
SECS="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
 --section SchedulerStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
 --section InstructionStats --section SourceCounters"
for v in lane split; do
  for s in 8x4096x2048x16 16x1536x1024x16; do
    timeout 120 ncu --clock-control none -k regex:_selective_scan -c 3 $SECS -f -o $OUT/ncu_${v}_${s} \
      python3 profile_gpu.py --once --shapes $s --dtypes bf16 --bwd-variants $v > $OUT/ncu_${v}_${s}.log 2>&1
    ncu --import $OUT/ncu_${v}_${s}.ncu-rep --page details > $OUT/ncu_${v}_${s}.txt 2>&1
    el
  done
done
ncu --import $OUT/ncu_lane_8x4096x2048x16.ncu-rep --page source --csv --print-source sass \
    > $OUT/src_lane_8x4096.csv 2>&1 || true
ls -la $OUT; el
grep -E "^\s+[0-9.]+ us" $OUT/breakdown.txt | head -5
grep -E "Duration|Registers Per|Achieved Occupancy|Issue Slots Busy|No Eligible|Warp Cycles Per Issued" $OUT/ncu_lane_8x4096x2048x16.txt
