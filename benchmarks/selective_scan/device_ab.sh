#!/bin/bash
# One device call (2026-12-01, seventh session): register caps and LEAN for the lane backward's
# main kernel, register caps for the lane forward (16x1536: 1.45 waves at 128 registers), timed
# kernel by kernel (profile_gpu.py --breakdown; outputs are checked by the tests, not here).
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
cd benchmarks/selective_scan
timeout 420 python3 profile_gpu.py --breakdown --shapes 16x1536x1024x16,8x4096x2048x16 --dtypes bf16,fp32 \
  --bwd-variants lane,lane-lean2,lane-r184,lane-lean2-r200,lane-lean2-r184,lane-lean2-r168,lane-f96,lane-f80 \
  > $OUT/ab.txt 2>&1
grep -E "bwd=|_selective_scan_(bwd_lane|fwd_lane)_kernel" $OUT/ab.txt
