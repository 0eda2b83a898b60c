#!/bin/bash
# Fifteenth session, call 2: the real pass's 1.45 waves (call 1: 128 registers, 8 programs per
# multiprocessor) against register caps of the lane forward (``triton_fwd.LANE_OPTIONS``, bench
# option fN; the local pass already holds 80) at the shapes where the forward runs 1.45 waves;
# ours only (no mamba-ssm build), each cap against the default in the same run.
source benchmarks/selective_scan/device_lib.sh
cd benchmarks/selective_scan
timeout 400 python3 bench_gpu.py --graph --shapes 1x1536x4096x16,16x1536x1024x16,1x1024x65536x16 \
    --bwd-variants lane,lane-f104,lane-f96,lane-f88,lane-f80 --out $L/bench.json > $L/bench.log 2>&1
grep -v '^{' $L/bench.log | tail -34; el
