#!/bin/bash
# Thirtieth session, call 1 (with experiments/thirtieth_ch2_local.patch applied): the split
# forward's local pass with two channels a thread
# (triton_fwd.LANE_CH2_LOCAL, the two-channel kernel's LOCAL: one copy of the B rows for both
# halves; sm_90 bf16 127 registers, 25.9 instructions a channel-step against the one-channel
# local pass's 28.2 at 64), its register cap 96 (no spills) and local segments a real one
# (LANE_LOCAL_FINE 1 / 2 / 4). GPU tests of the two-channel forward with it, kernel durations,
# then every variant beside mamba-ssm's CUDA kernel (built in this call), checked against
# float64 before it is timed.
source benchmarks/selective_scan/device_lib.sh
start_mamba_build
cd benchmarks/selective_scan
CL=triton_fwd.LANE_CH2_LOCAL=1; R=triton_fwd.LANE_CH2_LOCAL_REGS; F=triton_fwd.LANE_LOCAL_FINE
(cd ../.. && gpu_tests 150 tests/ops/selective_scan/test_selective_scan_triton.py \
    -k "gpu_forward_two_channels")
el
timeout 120 python3 fwd_kernel_split.py --graph --shapes 1x1536x4096x16 --dtypes bf16 \
    --variants "base;$CL;$CL,$R=96;$CL,$F=4;$CL,$F=1" > $L/split.log 2>&1
grep -vE "^\s*$|Warn|warn" $L/split.log | tail -30
el
cd ../.. && wait_mamba_build 300 && cd benchmarks/selective_scan
el
timeout 200 python3 fwd_knob_sweep.py --mamba --rounds 5 --shapes 1x1536x4096x16 \
    --dtypes bf16,fp32 --variants "base;$CL;$CL,$R=96;$CL,$F=4" --out $OUT/sweep.json 2>&1 \
    | tee $L/sweep.log | grep -E " ms|Error|rror"
el
