#!/bin/bash
# Twenty-eighth session, call 3: the unmasked loop with masks kept on its loads (the kernels'
# LDM: call 1's Nsight Compute put the split passes' loss in long-scoreboard stalls on the next
# tile's loads, which ptxas sinks to the loop's end without masks; with 32-bit offsets also in
# the two-channel real pass), and each pass with its own I32 / AHEAD / LDM: the split forward's
# kernels at (1, 1536, 4096) (fwd_kernel_split, graph), the forward beside the library's, the
# unsplit shapes; then the three 2^20-step GPU tests with the host C kernels built.
source benchmarks/selective_scan/device_lib.sh
cd benchmarks/selective_scan
E=triton_fwd.LANE_EVEN=2; I=triton_fwd.LANE_I32; H=triton_fwd.LANE_EVEN_AHEAD; M=triton_fwd.LANE_EVEN_LDM
RI=triton_fwd.LANE_REAL_I32; RH=triton_fwd.LANE_REAL_AHEAD; RM=triton_fwd.LANE_REAL_LDM
V="base;$E,$I=0,$H=1,$M=1;$E,$I=0,$H=2,$M=1;$E,$I=0,$H=1,$M=2;$E,$I=1,$H=2,$M=1;$E,$I=1,$H=2,$M=2"
V="$V;$E,$I=1,$H=2,$M=1,$RI=0,$RH=1,$RM=1;$E,$I=1,$H=2,$M=1,$RI=0,$RH=2,$RM=1"
timeout 150 python3 fwd_kernel_split.py --graph --shapes 1x1536x4096x16 --dtypes bf16 \
    --variants "$V" > $L/split.log 2>&1; grep -vE "^\s*$" $L/split.log | tail -40
el
timeout 170 python3 fwd_knob_sweep.py --rounds 5 --shapes 1x1536x4096x16 --dtypes bf16 \
    --variants "$V" 2>&1 | tee $L/sweep.log | grep -E " ms|Error|rror"
el
V2="base;$I=0;$M=1;$I=0,$M=1;$I=0,$H=1,$M=1;$M=2"
timeout 130 python3 fwd_knob_sweep.py --rounds 3 --shapes 8x4096x2048x16,16x1536x1024x16 \
    --dtypes bf16,fp32 --variants "$V2" 2>&1 | tee $L/sweep2.log | grep -E " ms|Error|rror"
el
cd ../..
build_cpu_kernels
timeout 100 python3 -m pytest -q -rfE -m gpu -p no:cacheprovider \
    tests/ops/selective_scan/test_long_sequences.py -k "test_triton_gpu_long_sequence" \
    > $L/long_tests.log 2>&1
grep -E "^FAILED|^ERROR|passed|failed" $L/long_tests.log | tail -5
el
