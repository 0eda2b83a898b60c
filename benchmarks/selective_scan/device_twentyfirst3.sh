#!/bin/bash
# Twenty-first session, call 3: Nsight Compute on the batch-1 bf16 forward, the library's kernels
# against ROW0_AHEAD = 1 (slower in call 1: did the real pass's wait on B row 0 move to row 1?),
# with the pipes' utilization (which of MUFU (XU), the MIO queue, FMA is busiest) and the SM clock
# under load. Ran with experiments/twentieth_row0_ahead.patch applied (git apply).
source benchmarks/selective_scan/device_lib.sh
cd benchmarks/selective_scan
SECS="--section LaunchStats --section Occupancy --section WarpStateStats --section SourceCounters \
 --section SchedulerStats --section ComputeWorkloadAnalysis --section InstructionStats"
MET="sm__cycles_elapsed.avg.per_second,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,\
sm__pipe_shared_cycles_active.avg.pct_of_peak_sustained_active,\
sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,\
sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active,\
sm__inst_executed_pipe_uniform.avg.pct_of_peak_sustained_active,\
smsp__inst_executed.sum"
for v in base row0; do
  O=""; [ $v = row0 ] && O="--lane-options ROW0_AHEAD=1"
  timeout 150 ncu --clock-control none -k regex:_selective_scan_fwd -c 2 $SECS --metrics $MET \
    --import-source no -f -o /tmp/ncu_$v python3 profile_gpu.py --once --fwd --shapes 1x1536x4096x16 \
    --dtypes bf16 $O > $L/ncu_$v.log 2>&1
  if [ ! -f /tmp/ncu_$v.ncu-rep ]; then  # a metric name it does not know: the sections alone
    tail -3 $L/ncu_$v.log
    timeout 150 ncu --clock-control none -k regex:_selective_scan_fwd -c 2 $SECS --import-source no \
      -f -o /tmp/ncu_$v python3 profile_gpu.py --once --fwd --shapes 1x1536x4096x16 --dtypes bf16 $O \
      > $L/ncu_$v.log 2>&1
  fi
  tail -2 $L/ncu_$v.log
  ncu --import /tmp/ncu_$v.ncu-rep --page details --print-details all > $OUT/ncu_$v.txt 2>&1
  ncu --import /tmp/ncu_$v.ncu-rep --page raw --csv > $OUT/ncu_raw_$v.csv 2>&1
  ncu --import /tmp/ncu_$v.ncu-rep --page source --csv --print-source sass > $OUT/ncu_src_$v.csv 2>&1
  grep -E "_selective_scan_fwd|^    Duration|Registers Per Thread|Issue Slots Busy|Eligible Warps|Stall|pipe|per_second|shfl" \
    $OUT/ncu_$v.txt | head -40
  el
done
