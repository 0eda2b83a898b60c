#!/bin/bash
# Sixteenth session, call 1: the time-lane forward with its states split over 2 and 4 warps a
# channel (the kernel's W as it was then; call 2 replaced that split by the time lanes' split and
# took W = 4 out, so the tlane-w4 variants below no longer run): its GPU tests (every W), Nsight
# Compute at (1, 1536, 4096, 16) bf16 for W = 2 and 4, then the batch-1 forward variants.
source benchmarks/selective_scan/device_lib.sh
start_mamba_build
timeout 150 python3 -m pytest -q -rfE -m gpu -p no:cacheprovider tests/ops/selective_scan/test_triton_fwd_tlane.py \
    > "$L/gpu_tests.log" 2>&1
grep -E "^FAILED|^ERROR|passed|failed" "$L/gpu_tests.log" | tail -8; el
cd benchmarks/selective_scan
SECS="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
 --section SchedulerStats --section InstructionStats"
for w in 2 4; do
  timeout 60 ncu --clock-control none -k regex:_selective_scan_fwd -c 2 $SECS -f -o /tmp/ncu_w$w \
    python3 profile_gpu.py --once --fwd --shapes 1x1536x4096x16 --dtypes bf16 --time-lanes 0 \
    --tlane-warps $w > $L/ncu_w$w.log 2>&1
  ncu --import /tmp/ncu_w$w.ncu-rep --page details > $OUT/ncu_w$w.txt 2>&1
  grep -E "_selective_scan_fwd|^    Duration|Registers Per Thread|Achieved Occupancy|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Executed Instructions  " $OUT/ncu_w$w.txt | head -20
  el
done
cd ../..
wait_mamba_build 250; el
cd benchmarks/selective_scan
timeout 200 python3 bench_gpu.py --graph --shapes 1x1536x4096x16,1x1024x65536x16 \
    --fwd-variants lane,tlane,tlane-bc1,tlane-w2,tlane-w2-bc1,tlane-w4,tlane-w4-bc1 \
    --out $L/bench.json > $L/bench.log 2>&1
grep -v '^{' $L/bench.log | tail -40; el
