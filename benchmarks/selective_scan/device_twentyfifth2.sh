#!/bin/bash
# Twenty-fifth session, call 2: the time-lane forward with its tile loop pipelined by Triton
# (TLANE_STAGES: the B / C rows and u / delta / z as cp.async copies to shared memory) and with
# 16-bit B / C rows (TLANE_BC16), timed beside the split forward; Nsight Compute on the
# pipelined kernel; the time-lane GPU tests with the new options.
source benchmarks/selective_scan/device_lib.sh
cd benchmarks/selective_scan
TL="triton_fwd.FWD_TIME_LANES=1"
V="base;$TL,triton_fwd.TLANE_BC_MODE=1;$TL,triton_fwd.TLANE_STAGES=3;$TL,triton_fwd.TLANE_STAGES=4"
V="$V;$TL,triton_fwd.TLANE_BC_MODE=1,triton_fwd.TLANE_BC16=1;$TL,triton_fwd.TLANE_STAGES=3,triton_fwd.TLANE_BC16=1"
V="$V;$TL,triton_fwd.TLANE_BC_MODE=2,triton_fwd.TLANE_BC16=1;$TL,triton_fwd.TLANE_BC_MODE=0,triton_fwd.TLANE_BC16=1"
timeout 200 python3 fwd_knob_sweep.py --rounds 3 --shapes 1x1536x4096x16 --dtypes bf16,fp32 \
    --variants "$V" 2>&1 | tee $L/sweep.log | grep -E " ms|Error|rror"
el
SECS="--section LaunchStats --section Occupancy --section WarpStateStats --section SourceCounters \
 --section SchedulerStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section SpeedOfLight"
for cfg in "s3:3:0" "s3r16:3:1"; do
  IFS=: read name st r16 <<< "$cfg"
  timeout 100 ncu --clock-control none -k regex:_selective_scan_fwd_tlane -c 1 $SECS --import-source no \
    -f -o /tmp/ncu_$name python3 -c "
import sys; sys.argv=['profile_gpu.py','--once','--fwd','--shapes','1x1536x4096x16','--dtypes','bf16','--time-lanes','1']
from ssmscan.ops.selective_scan import triton_fwd
triton_fwd.TLANE_STAGES=$st; triton_fwd.TLANE_BC16=bool($r16)
import runpy; runpy.run_path('profile_gpu.py', run_name='__main__')" > $L/ncu_$name.log 2>&1
  tail -1 $L/ncu_$name.log
  ncu --import /tmp/ncu_$name.ncu-rep --page details > $OUT/ncu_$name.txt 2>&1
  ncu --import /tmp/ncu_$name.ncu-rep --page source --csv --print-source sass > $OUT/ncu_src_$name.csv 2>&1
  grep -E "^    Duration|Registers Per Thread|Achieved Occupancy|Issue Slots Busy|Warp Cycles Per Issued|Eligible Warps|L1/TEX Hit" $OUT/ncu_$name.txt | head -12
  el
done
cd ../..
timeout 200 python3 -m pytest -q -rfE -m gpu -n 4 -p no:cacheprovider \
    tests/ops/selective_scan/test_triton_fwd_tlane.py > $L/gpu_tests.log 2>&1
grep -E "^FAILED|^ERROR|passed|failed" $L/gpu_tests.log | tail -8
el
