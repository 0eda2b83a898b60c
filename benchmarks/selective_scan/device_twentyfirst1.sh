#!/bin/bash
# Twenty-first session, call 1: the real pass's load wait and the launch gaps of the batch-1
# forward. ROW0_AHEAD = 1 / 2 (a tile's first B / C rows loaded two tiles ahead) and
# triton_fwd.LANE_PDL = 1 / 2 (programmatic dependent launch of the local and the real pass):
# each kernel's GPU time, then the forward under CUDA graphs beside mamba-ssm, every variant
# checked against float64 first. Ran with experiments/twentieth_row0_ahead.patch and
# experiments/twentyfirst_pdl.patch applied (git apply).
source benchmarks/selective_scan/device_lib.sh
start_mamba_build
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw --format=csv > $L/smi.txt
cd benchmarks/selective_scan
R="ROW0_AHEAD=1;ROW0_AHEAD=2"
P="triton_fwd.LANE_PDL=1;triton_fwd.LANE_PDL=2"
timeout 120 python3 fwd_kernel_split.py --shapes 1x1536x4096x16 --variants "base;$R" > $L/split.log 2>&1
grep -v Warn $L/split.log | grep -v _warn_once; el
cd ../..; wait_mamba_build 200; el; cd benchmarks/selective_scan
timeout 300 python3 fwd_knob_sweep.py --mamba --rounds 3 --shapes 1x1536x4096x16 --out $L/b1.json \
    --variants "base;$R;$P;triton_fwd.LANE_PDL=2,ROW0_AHEAD=1" > $L/b1.log 2>&1
grep -E " ms|FAILED|Error" $L/b1.log; el
timeout 200 python3 fwd_knob_sweep.py --rounds 2 --shapes 8x4096x2048x16,16x1536x1024x16,1x1024x65536x16 \
    --dtypes bf16 --out $L/other.json --variants "base;ROW0_AHEAD=1;triton_fwd.LANE_PDL=2" > $L/other.log 2>&1
grep -E " ms|FAILED|Error" $L/other.log; el
