#!/bin/bash
# Twenty-ninth session, call 7 (the library as committed, no patch): the missed row and its fp32
# twin beside mamba-ssm's CUDA kernel, built in the same call, 5 interleaved rounds.
source benchmarks/selective_scan/device_lib.sh
start_mamba_build
wait_mamba_build 420
el
cd benchmarks/selective_scan
timeout 150 python3 fwd_knob_sweep.py --mamba --rounds 5 --shapes 1x1536x4096x16 \
    --dtypes bf16,fp32 --variants base --out $OUT/row.json 2>&1 | tee $L/sweep.log \
    | grep -E " ms|Error|rror"
el
