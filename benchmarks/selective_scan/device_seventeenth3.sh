#!/bin/bash
# Seventeenth session, call 3 (no mamba-ssm build): the lane forward loading the next tile's
# B / C row j right after the current tile's step j, into the registers row j leaves (BC_ROLL:
# no end-of-loop register copies, which Nsight Compute showed waiting on those loads), alone and
# with the rows' L1 prefetch (PF_BC), forward only, CUDA graphs (fwd_knob_sweep.py); then the
# options' GPU tests.
source benchmarks/selective_scan/device_lib.sh
cd benchmarks/selective_scan
V="base;BC_ROLL=1;BC_ROLL=1,PF_BC=1;BC_ROLL=1,PF_BC=2;BC_ROLL=1,PF_BC=4;BC_ROLL=1,PF_BC=2,DT_DEFER=1"
V="$V;BC_ROLL=1,PF_BC=2,triton_common.FWD_TARGET_WARPS=16896;PF_BC=2;BC_JIT=1,PF_BC=2"
timeout 250 python3 fwd_knob_sweep.py --variants "$V" --shapes 1x1536x4096x16,1x1024x65536x16 \
    --out $L/sweep_b1.json > $L/sweep_b1.log 2>&1
cat $L/sweep_b1.log | tail -40; el
timeout 150 python3 fwd_knob_sweep.py --variants "base;BC_ROLL=1;BC_ROLL=1,PF_BC=2;BC_ROLL=1,PF_BC=4" \
    --shapes 8x4096x2048x16,16x1536x1024x16 --rounds 2 --out $L/sweep_big.json > $L/sweep_big.log 2>&1
cat $L/sweep_big.log | tail -24; el
cd ../..
timeout 110 python3 -m pytest -q -rfE -m gpu -n 4 -p no:cacheprovider \
    tests/ops/selective_scan/test_selective_scan_triton.py -k "lane_options and roll" > "$L/gpu_tests.log" 2>&1
grep -E "^FAILED|^ERROR|passed|failed" "$L/gpu_tests.log" | tail -5; el
