#!/bin/bash
# Twenty-fifth session, call 1: the time-lane forward (one pass, each exponential once) as it
# stands, timed beside the library's split forward at the missed row, and profiled (Nsight
# Compute: warp states, memory, per-instruction stalls) to see what its latency is.
source benchmarks/selective_scan/device_lib.sh
cd benchmarks/selective_scan
TL="triton_fwd.FWD_TIME_LANES=1"
V="base;$TL,triton_fwd.TLANE_BC_MODE=0;$TL,triton_fwd.TLANE_BC_MODE=1;$TL,triton_fwd.TLANE_BC_MODE=2"
V="$V;$TL,triton_fwd.TLANE_BC_MODE=1,triton_fwd.TLANE_WARPS=2"
timeout 200 python3 fwd_knob_sweep.py --rounds 3 --shapes 1x1536x4096x16 --dtypes bf16,fp32 \
    --variants "$V" 2>&1 | tee $L/sweep.log | grep -E " ms|Error|rror"
el
SECS="--section LaunchStats --section Occupancy --section WarpStateStats --section SourceCounters \
 --section SchedulerStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis"
for w in 1 2; do
  timeout 100 ncu --clock-control none -k regex:_selective_scan_fwd_tlane -c 1 $SECS --import-source no \
    -f -o /tmp/ncu_tl$w python3 profile_gpu.py --once --fwd --shapes 1x1536x4096x16 --dtypes bf16 \
    --time-lanes 1 --tlane-warps $w > $L/ncu_tl$w.log 2>&1
  tail -2 $L/ncu_tl$w.log
  ncu --import /tmp/ncu_tl$w.ncu-rep --page details > $OUT/ncu_tl$w.txt 2>&1
  ncu --import /tmp/ncu_tl$w.ncu-rep --page source --csv --print-source sass > $OUT/ncu_src_tl$w.csv 2>&1
  grep -E "^    Duration|Registers Per Thread|Achieved Occupancy|Issue Slots Busy|Warp Cycles Per Issued|Eligible Warps|L1/TEX Hit|L2 Hit|Mem Busy|Max Bandwidth|Stall" $OUT/ncu_tl$w.txt | head -30
  el
done
