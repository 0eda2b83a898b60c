#!/bin/bash
# Sixteenth session, call 2: the time-lane forward with two warps a channel splitting each
# 128-step tile's time lanes (triton_fwd.TLANE_WARPS = 2; call 1's split of the states over the
# warps is gone): its GPU tests (W 1 and 2), Nsight Compute at (1, 1536, 4096, 16) bf16, then the
# batch-1 forward variants (with register caps) beside mamba-ssm.
source benchmarks/selective_scan/device_lib.sh
start_mamba_build
timeout 150 python3 -m pytest -q -rfE -m gpu -p no:cacheprovider tests/ops/selective_scan/test_triton_fwd_tlane.py \
    > "$L/gpu_tests.log" 2>&1
grep -E "^FAILED|^ERROR|passed|failed" "$L/gpu_tests.log" | tail -8; el
cd benchmarks/selective_scan
SECS="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
 --section SchedulerStats --section InstructionStats"
for sh in 1x1536x4096x16 1x1024x65536x16; do
  timeout 60 ncu --clock-control none -k regex:_selective_scan_fwd -c 1 $SECS -f -o /tmp/ncu_$sh \
    python3 profile_gpu.py --once --fwd --shapes $sh --dtypes bf16 --time-lanes 0 \
    --tlane-warps 2 > $L/ncu_$sh.log 2>&1
  ncu --import /tmp/ncu_$sh.ncu-rep --page details > $OUT/ncu_w2_$sh.txt 2>&1
  grep -E "_selective_scan_fwd|^    Duration|Registers Per Thread|Achieved Occupancy|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Executed Instructions  |Waves Per SM" $OUT/ncu_w2_$sh.txt | head -20
  el
done
cd ../..
wait_mamba_build 250; el
cd benchmarks/selective_scan
timeout 240 python3 bench_gpu.py --graph --shapes 1x1536x4096x16,1x1024x65536x16 \
    --fwd-variants lane,tlane-bc1,tlane-w2,tlane-w2-bc1,tlane-w2-r128,tlane-w2-bc1-r128,tlane-w2-bc2 \
    --out $L/bench.json > $L/bench.log 2>&1
grep -v '^{' $L/bench.log | tail -36; el
