#!/bin/bash
# Seventeenth session, call 2 (no mamba-ssm build): the lane forward with B / C loaded in the
# tile that uses them (BC_JIT: no register copy of the next tile's rows, 80 / 48 registers
# instead of 130 / 80 at batch 1 bf16), with and without their L1 prefetch (PF_BC tiles ahead),
# forward only, CUDA graphs (fwd_knob_sweep.py); first Nsight Compute's per-instruction stall
# samples (SourceCounters) of the default and of BC_JIT + PF_BC=2 at (1, 1536, 4096) bf16.
source benchmarks/selective_scan/device_lib.sh
cd benchmarks/selective_scan
ncu --version | tail -1
SECS="--section LaunchStats --section Occupancy --section WarpStateStats --section SourceCounters \
 --section SchedulerStats --section MemoryWorkloadAnalysis_Tables"
for v in base jit; do
  o=""; [ $v = jit ] && o="--lane-options BC_JIT=1,PF_BC=2"
  timeout 90 ncu --clock-control none -k regex:_selective_scan_fwd -c 2 $SECS --import-source no \
    -f -o /tmp/ncu_$v python3 profile_gpu.py --once --fwd --shapes 1x1536x4096x16 --dtypes bf16 $o \
    > $L/ncu_$v.log 2>&1
  ncu --import /tmp/ncu_$v.ncu-rep --page details > $OUT/ncu_$v.txt 2>&1
  ncu --import /tmp/ncu_$v.ncu-rep --page source --csv --print-source sass > $OUT/ncu_src_$v.csv 2>&1
  ls -la $OUT/ncu_src_$v.csv; head -c 600 $OUT/ncu_src_$v.csv; echo
  grep -E "_selective_scan_fwd|^    Duration|Registers Per Thread|Achieved Occupancy|Issue Slots Busy|Warp Cycles Per Issued" $OUT/ncu_$v.txt | head -16
  el
done
V="base;BC_JIT=1;BC_JIT=1,PF_BC=1;BC_JIT=1,PF_BC=2;BC_JIT=1,PF_BC=4;BC_JIT=1,PF_BC=4,PF_ELEM=256,PF_EVERY=1"
V="$V;BC_JIT=1,PF_BC=2,DT_DEFER=1;BC_JIT=1,PF_BC=2,triton_common.FWD_TARGET_WARPS=16896;PF_BC=2"
timeout 250 python3 fwd_knob_sweep.py --variants "$V" --shapes 1x1536x4096x16,1x1024x65536x16 \
    --out $L/sweep_b1.json > $L/sweep_b1.log 2>&1
cat $L/sweep_b1.log | tail -40; el
timeout 150 python3 fwd_knob_sweep.py --variants "base;BC_JIT=1;BC_JIT=1,PF_BC=2;BC_JIT=1,PF_BC=4" \
    --shapes 8x4096x2048x16,16x1536x1024x16 --rounds 2 --out $L/sweep_big.json > $L/sweep_big.log 2>&1
cat $L/sweep_big.log | tail -24; el
cd ../..
timeout 110 python3 -m pytest -q -rfE -m gpu -n 4 -p no:cacheprovider \
    tests/ops/selective_scan/test_selective_scan_triton.py -k lane_options > "$L/gpu_tests.log" 2>&1
grep -E "^FAILED|^ERROR|passed|failed" "$L/gpu_tests.log" | tail -5; el
