#!/bin/bash
# Eighteenth session, call 3 (no mamba-ssm build): the lane forward's B / C rows staged through
# shared memory (kernel option BC_SMEM: one coalesced (8, NP) load of the next tile's rows a
# program, Triton's layout conversion to the lanes: 96 instead of 122 registers in the batch-1
# real pass, 48 instead of 64 in the local one), with segment counts that fill its waves, one-
# and two-warp programs; forward only, CUDA graphs (fwd_knob_sweep.py); then its GPU tests.
# (Call 2 was a sweep of segment counts run inline, its command recorded in RESULTS.md.)
source benchmarks/selective_scan/device_lib.sh
cd benchmarks/selective_scan
S="triton_fwd.LANE_SEGMENTS"
W="triton_fwd.FWD_WARPS"
V="base;BC_SMEM=1;BC_SMEM=1,$S=13;BC_SMEM=1,$S=27;BC_SMEM=1,$S=11;BC_SMEM=1,$W=1,$S=14"
V="$V;BC_SMEM=1,$W=1,$S=28;BC_SMEM=1,$W=1"
timeout 200 python3 fwd_knob_sweep.py --variants "$V" --shapes 1x1536x4096x16 --out $L/smem_b1.json \
    > $L/smem_b1.log 2>&1
tail -20 $L/smem_b1.log; el
timeout 150 python3 fwd_knob_sweep.py --variants "base;BC_SMEM=1;BC_SMEM=1,$S=82;BC_SMEM=1,$S=61" \
    --shapes 1x1024x65536x16 --rounds 2 --out $L/smem_long.json > $L/smem_long.log 2>&1
tail -10 $L/smem_long.log; el
timeout 120 python3 fwd_knob_sweep.py --variants "base;BC_SMEM=1;BC_SMEM=1,$W=1" \
    --shapes 8x4096x2048x16,16x1536x1024x16,2x1536x4096x16 --rounds 2 --out $L/smem_big.json \
    > $L/smem_big.log 2>&1
tail -20 $L/smem_big.log; el
cd ../..
timeout 100 python3 -m pytest -q -rfE -m gpu -n 8 -p no:cacheprovider -k smem \
    tests/ops/selective_scan/test_selective_scan_triton.py > "$L/gpu_tests.log" 2>&1
grep -E "^FAILED|^ERROR|passed|failed" "$L/gpu_tests.log" | tail -5; el
