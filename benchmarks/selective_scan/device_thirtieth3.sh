#!/bin/bash
# Thirtieth session, call 3: the split forward's one-channel local pass with its B rows staged
# through shared memory (triton_fwd.LANE_LOCAL_OPTIONS {BC_SMEM: 1, BC_ROLL: 0}: the next tile's
# rows still loaded a tile ahead, as an (8, 16) block, 2 registers a thread; sm_90 48 registers,
# 40 under a cap without spills: 25 two-warp programs a multiprocessor, the 2880 local programs
# at (1, 1536, 4096) in one wave), with 2 / 4 local segments a real one. Kernel durations, then
# every variant beside mamba-ssm's CUDA kernel (built in this call) at both split rows, checked
# against float64 before it is timed.
source benchmarks/selective_scan/device_lib.sh
start_mamba_build
cd benchmarks/selective_scan
S="LOCAL.BC_SMEM=1,LOCAL.BC_ROLL=0"; F=triton_fwd.LANE_LOCAL_FINE; C=triton_fwd.LANE_LOCAL_MAXNREG
V="base;$S;$S,$C=40;$S,$C=40,$F=4;$S,$F=4"
timeout 150 python3 fwd_kernel_split.py --graph --shapes 1x1536x4096x16 --dtypes bf16,fp32 \
    --variants "$V" > $L/split.log 2>&1
grep -vE "^\s*$|Warn|warn" $L/split.log | tail -60
el
cd ../.. && wait_mamba_build 300 && cd benchmarks/selective_scan
el
timeout 300 python3 fwd_knob_sweep.py --mamba --rounds 5 --shapes 1x1536x4096x16,1x1024x65536x16 \
    --dtypes bf16,fp32 --variants "$V" --out $OUT/sweep.json 2>&1 \
    | tee $L/sweep.log | grep -E " ms|Error|rror"
el
