#!/bin/bash
# Thirtieth session, call 4: Nsight Compute of the split forward's one-channel local pass at
# (1, 1536, 4096) bf16: the library (64 registers, 16 programs a multiprocessor, 2880 programs in
# 1.36 waves), its B rows through shared memory under a 40-register cap (25 a multiprocessor, one
# wave: as fast) and its rows loaded in the tile that uses them (48 registers: 20% slower). What
# bounds it, when neither more warps, fewer MUFU nor fewer instructions move it much.
source benchmarks/selective_scan/device_lib.sh
cd benchmarks/selective_scan
SECS="--section LaunchStats --section Occupancy --section WarpStateStats --section SchedulerStats \
 --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section SpeedOfLight \
 --section InstructionStats"
for cfg in "base:base" "smem40:LOCAL.BC_SMEM=1,LOCAL.BC_ROLL=0,triton_fwd.LANE_LOCAL_MAXNREG=40" \
           "jit:LOCAL.BC_JIT=1,LOCAL.BC_ROLL=0"; do
  IFS=: read name spec <<< "$cfg"
  timeout 120 ncu --clock-control none -k regex:_selective_scan_fwd_lane_kernel -c 1 $SECS \
    --metrics smsp__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts.avg.pct_of_peak_sustained_elapsed,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio \
    --import-source no -f -o /tmp/ncu_$name python3 -c "
import torch, bench_gpu, fwd_knob_sweep
kw = bench_gpu.make(1, 1536, 4096, 16, torch.bfloat16)
with fwd_knob_sweep.applied('$spec'):
    for _ in range(2):
        bench_gpu.ours_fwd(kw)
    torch.cuda.synchronize()
" > $L/ncu_$name.log 2>&1
  tail -1 $L/ncu_$name.log
  ncu --import /tmp/ncu_$name.ncu-rep --page details > $OUT/ncu_$name.txt 2>&1
  ncu --import /tmp/ncu_$name.ncu-rep --page raw --csv > $OUT/ncu_raw_$name.csv 2>&1
  grep -E "^    Duration|Registers Per Thread|Achieved Occupancy|Issue Slots Busy|Warp Cycles Per Issued|Eligible Warps|No Eligible|pipe_xu|lsu_wavefronts|mio_throttle" \
    $OUT/ncu_$name.txt | head -14
  el
done
