#!/bin/bash
# Twenty-eighth session, call 1: AOTInductor on the unmasked path (bf16 (16, 1536, 1024), the
# library's defaults: triton_fwd.LANE_EVEN) built with the system compiler and loaded in a fresh
# process, nothing else running (longer limits than the twenty-seventh session's); then Nsight
# Compute of the split forward's two passes at (1, 1536, 4096) bf16 with masks (the library),
# without (LANE_EVEN=2: masks off, 32-bit offsets, loads two tiles ahead) and with masks off alone.
source benchmarks/selective_scan/device_lib.sh
A=benchmarks/selective_scan/aoti_check.py
mkdir -p /tmp/aoti && CXX=/usr/bin/g++ timeout 240 python3 $A build /tmp/aoti bf16 16 1536 1024 \
    > $L/aoti.log 2>&1; echo "aoti build rc=$?"; grep -E "exported|packaged" $L/aoti.log | cut -c1-200
el
for t in 150 60; do
  timeout $t python3 $A load /tmp/aoti bf16 16 1536 1024 >> $L/aoti.log 2>&1; rc=$?
  echo "aoti load rc=$rc"; el; [ $rc = 0 ] && break
done
grep -E "AOTI" $L/aoti.log | tail -2
cd benchmarks/selective_scan
SECS="--section LaunchStats --section Occupancy --section WarpStateStats --section SourceCounters \
 --section SchedulerStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
 --section SpeedOfLight --section InstructionStats"
for cfg in "mask:base" "even:triton_fwd.LANE_EVEN=2" \
           "nomask:triton_fwd.LANE_EVEN=2,triton_fwd.LANE_I32=0,triton_fwd.LANE_EVEN_AHEAD=1"; do
  IFS=: read name spec <<< "$cfg"
  timeout 120 ncu --clock-control none -k regex:_selective_scan_fwd_lane -c 2 $SECS \
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
  ncu --import /tmp/ncu_$name.ncu-rep --page source --csv --print-source sass > $OUT/ncu_src_$name.csv 2>&1
  grep -E "^  _selective|^    Duration|Registers Per Thread|Issue Slots Busy|Warp Cycles Per Issued|Eligible Warps" \
    $OUT/ncu_$name.txt | head -14
  el
done
