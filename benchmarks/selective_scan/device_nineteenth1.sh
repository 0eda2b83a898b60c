#!/bin/bash
# Nineteenth session, call 1: the lane forward's tile loop pipelined by Triton
# (triton_fwd.LANE_PIPE = stages: each tile's B / C rows loaded as (TT, NP) blocks in the tile,
# cp.async into shared memory stages - 1 tiles ahead; 64 registers instead of 122) against the
# default at every shape; its segments at the batch-1 shapes; its GPU tests; then the batch-1
# shapes beside mamba-ssm. Ran with experiments/nineteenth_lane_pipe.patch applied (git apply):
# the library has no LANE_PIPE (slower in bf16; benchmarks/RESULTS.md, nineteenth session).
source benchmarks/selective_scan/device_lib.sh
start_mamba_build
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem --format=csv > $L/smi.txt
cd benchmarks/selective_scan
P="triton_fwd.LANE_PIPE=3"
timeout 170 python3 fwd_knob_sweep.py --rounds 3 --out $L/main.json \
    --variants "base;triton_fwd.LANE_PIPE=2;$P;triton_fwd.LANE_PIPE=4;BC_JIT=3,STAGES=3;$P,triton_fwd.FWD_WARPS=4" \
    > $L/main.log 2>&1; grep -E " ms|FAILED|Error" $L/main.log; el
timeout 90 python3 fwd_knob_sweep.py --rounds 2 --shapes 1x1536x4096x16 --out $L/seg1.json \
    --variants "$P;$P,triton_fwd.LANE_SEGMENTS=11;$P,triton_fwd.LANE_SEGMENTS=22;$P,triton_fwd.LANE_SEGMENTS=33;$P,triton_fwd.LANE_SEGMENTS=44;triton_fwd.LANE_PIPE=4,triton_fwd.LANE_SEGMENTS=22" \
    > $L/seg1.log 2>&1; grep -E " ms|FAILED|Error" $L/seg1.log; el
timeout 70 python3 fwd_knob_sweep.py --rounds 2 --shapes 1x1024x65536x16 --out $L/seg2.json \
    --variants "$P;$P,triton_fwd.LANE_SEGMENTS=33;$P,triton_fwd.LANE_SEGMENTS=99;$P,triton_fwd.LANE_SEGMENTS=132" \
    > $L/seg2.log 2>&1; grep -E " ms|FAILED|Error" $L/seg2.log; el
cd ../..
gpu_tests 120 tests/ops/selective_scan/test_selective_scan_triton.py -k "pipelined and (stages3 or stages4) or bc-blocks or tile-loads"; el
wait_mamba_build 60; cd benchmarks/selective_scan; el
timeout 80 python3 fwd_knob_sweep.py --mamba --rounds 3 --shapes 1x1536x4096x16,1x1024x65536x16 \
    --out $L/mamba.json --variants "base;$P" > $L/mamba.log 2>&1; grep -E " ms|FAILED|Error" $L/mamba.log; el
