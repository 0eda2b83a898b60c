#!/bin/bash
# Twenty-fifth session, call 4: the time-lane forward with two channels a warp (TLANE_CH2: every
# B / C row serves both) timed beside the split at the missed row and (1, 1024, 65536); Nsight
# Compute on it; the time-lane GPU tests (16-bit rows, two channels).
source benchmarks/selective_scan/device_lib.sh
cd benchmarks/selective_scan
TL="triton_fwd.FWD_TIME_LANES=1"
R16="triton_fwd.TLANE_BC16=1"
C2="triton_fwd.TLANE_CH2=1"
V="base;$TL,triton_fwd.TLANE_BC_MODE=2,$R16;$TL,triton_fwd.TLANE_BC_MODE=2,$R16,$C2"
V="$V;$TL,triton_fwd.TLANE_BC_MODE=1,$R16,$C2;$TL,triton_fwd.TLANE_BC_MODE=2,$C2;$TL,triton_fwd.TLANE_BC_MODE=1,$C2"
timeout 150 python3 fwd_knob_sweep.py --rounds 3 --shapes 1x1536x4096x16 --dtypes bf16,fp32 \
    --variants "$V" 2>&1 | tee $L/sweep.log | grep -E " ms|Error|rror"
el
SECS="--section LaunchStats --section Occupancy --section WarpStateStats --section SourceCounters \
 --section SchedulerStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section SpeedOfLight"
name=ch2
timeout 100 ncu --clock-control none -k regex:_selective_scan_fwd_tlane -c 1 $SECS --import-source no \
  -f -o /tmp/ncu_$name python3 -c "
import sys; sys.argv=['profile_gpu.py','--once','--fwd','--shapes','1x1536x4096x16','--dtypes','bf16','--time-lanes','2']
from ssmscan.ops.selective_scan import triton_fwd
triton_fwd.TLANE_BC16=True; triton_fwd.TLANE_CH2=True
import runpy; runpy.run_path('profile_gpu.py', run_name='__main__')" > $L/ncu_$name.log 2>&1
tail -1 $L/ncu_$name.log
ncu --import /tmp/ncu_$name.ncu-rep --page details > $OUT/ncu_$name.txt 2>&1
ncu --import /tmp/ncu_$name.ncu-rep --page source --csv --print-source sass > $OUT/ncu_src_$name.csv 2>&1
grep -E "^    Duration|Registers Per Thread|Issue Slots Busy|Warp Cycles Per Issued|Eligible Warps|L1/TEX Hit" $OUT/ncu_$name.txt | head -12
el
cd ../..
timeout 150 python3 -m pytest -q -rfE -m gpu -n 4 -p no:cacheprovider \
    tests/ops/selective_scan/test_triton_fwd_tlane.py > $L/gpu_tests.log 2>&1
grep -E "^FAILED|^ERROR|passed|failed" $L/gpu_tests.log | tail -8
el
