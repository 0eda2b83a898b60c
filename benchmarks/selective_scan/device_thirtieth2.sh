#!/bin/bash
# Thirtieth session, call 2: the split forward's one-channel local pass with its B rows loaded in
# the tile that uses them (triton_fwd.LANE_LOCAL_OPTIONS {BC_JIT: 1, BC_ROLL: 0}: sm_90 48
# registers instead of 64, 21 two-warp programs a multiprocessor instead of 16), with 1 / 2 / 4
# local segments a real one and with an L1 prefetch of the next tile's rows (PF_BC 1); one-warp
# programs (FWD_WARPS 1). Kernel durations, then every variant beside mamba-ssm's CUDA kernel
# (built in this call), checked against float64 before it is timed.
source benchmarks/selective_scan/device_lib.sh
start_mamba_build
cd benchmarks/selective_scan
J="LOCAL.BC_JIT=1,LOCAL.BC_ROLL=0"; F=triton_fwd.LANE_LOCAL_FINE
V="base;$J;$J,$F=1;$J,$F=4;$J,LOCAL.PF_BC=1;triton_fwd.FWD_WARPS=1"
timeout 150 python3 fwd_kernel_split.py --graph --shapes 1x1536x4096x16 --dtypes bf16 \
    --variants "$V" > $L/split.log 2>&1
grep -vE "^\s*$|Warn|warn" $L/split.log | tail -40
el
cd ../.. && wait_mamba_build 300 && cd benchmarks/selective_scan
el
timeout 250 python3 fwd_knob_sweep.py --mamba --rounds 5 --shapes 1x1536x4096x16 \
    --dtypes bf16,fp32 --variants "$V" --out $OUT/sweep.json 2>&1 \
    | tee $L/sweep.log | grep -E " ms|Error|rror"
el
