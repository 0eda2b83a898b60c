#!/bin/bash
# Fifteenth session, call 1: why the batch-1 forwards miss. Nsight Compute on the forward at
# (1, 1536, 4096, 16) bf16: the segment split's local and real passes, and the time-lane kernel
# (Note [selective scan forward time lanes]) with its B / C rows loaded where used (BC_MODE 0), at
# the top of the tile (1) and a tile ahead (2); the time-lane GPU tests; then the benchmark's
# forward variants beside mamba-ssm at the two batch-1 shapes.
source benchmarks/selective_scan/device_lib.sh
start_mamba_build
cd benchmarks/selective_scan
SECS="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
 --section SchedulerStats --section ComputeWorkloadAnalysis --section InstructionStats"
for v in split 0 1 2; do
  tl=""; [ "$v" != split ] && tl="--time-lanes $v"
  timeout 75 ncu --clock-control none -k regex:_selective_scan_fwd -c 4 $SECS -f -o /tmp/ncu_$v \
    python3 profile_gpu.py --once --fwd --shapes 1x1536x4096x16 --dtypes bf16 $tl > $L/ncu_$v.log 2>&1
  ncu --import /tmp/ncu_$v.ncu-rep --page details > $OUT/ncu_$v.txt 2>&1
  grep -E "_selective_scan_fwd|^    Duration|Registers Per Thread|Achieved Occupancy|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Executed Ipc A" $OUT/ncu_$v.txt | head -40
  el
done
cd ../..
timeout 100 python3 -m pytest -q -rfE -m gpu -p no:cacheprovider tests/ops/selective_scan/test_triton_fwd_tlane.py \
    > "$L/gpu_tests.log" 2>&1
grep -E "^FAILED|^ERROR|passed|failed" "$L/gpu_tests.log" | tail -5; el
wait_mamba_build 200; el
cd benchmarks/selective_scan
timeout 150 python3 bench_gpu.py --graph --shapes 1x1536x4096x16,1x1024x65536x16 \
    --fwd-variants lane,tlane,tlane-bc1,tlane-bc2 --out $L/bench.json > $L/bench.log 2>&1
grep -v '^{' $L/bench.log | tail -20; el
