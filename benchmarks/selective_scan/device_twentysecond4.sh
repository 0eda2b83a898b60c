#!/bin/bash
# Twenty-second session, call 4 (run as one command line; kept here as a script): the two-channel
# real pass at (1, 1536, 4096): segment counts around the one wave it fills at 16 segments
# (forward ms, graphs), then Nsight Compute's throughput sections on its kernels (local pass,
# two-channel real pass) to see what bounds it now.
source benchmarks/selective_scan/device_lib.sh
cd benchmarks/selective_scan
S=triton_fwd.LANE_SEGMENTS
C=triton_fwd.LANE_CH2=1
timeout 200 python3 fwd_knob_sweep.py --rounds 3 --shapes 1x1536x4096x16 \
    --variants "base;$C;$C,$S=11;$C,$S=14;$C,$S=16;$C,$S=16,triton_fwd.LANE_CH2_REGS=128" 2>&1 \
    | grep -E " ms|Error|rror"
el
cat > /tmp/prof_ch2.py <<'PY'
import sys
sys.path.insert(0, ".")
import bench_gpu, torch
from ssmscan.ops.selective_scan import triton_fwd
triton_fwd.LANE_CH2 = 1
triton_fwd.LANE_SEGMENTS = 16
kw = bench_gpu.make(1, 1536, 4096, 16, torch.bfloat16)
for _ in range(3):
    bench_gpu.ours_fwd(kw)
torch.cuda.synchronize()
PY
SECS="--section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
 --section Occupancy --section WarpStateStats --section SchedulerStats"
timeout 150 ncu --clock-control none -k regex:_selective_scan_fwd -c 2 $SECS \
  -f -o /tmp/ncu_ch2 python3 /tmp/prof_ch2.py > $L/ncu_ch2.log 2>&1
tail -1 $L/ncu_ch2.log
ncu --import /tmp/ncu_ch2.ncu-rep --page details > $OUT/ncu_ch2.txt 2>&1
ncu --import /tmp/ncu_ch2.ncu-rep --page raw --csv > $OUT/ncu_ch2_raw.csv 2>&1
grep -v "^    ---\|^$" $OUT/ncu_ch2.txt | grep -E "_selective|Duration|L1/TEX Cache Throughput|Issue Slots Busy|Achieved Occ|Registers Per|Warp Cycles Per Issued|Eligible Warps" | head -30
el
