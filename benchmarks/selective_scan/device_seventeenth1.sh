#!/bin/bash
# Seventeenth session, call 1 (no mamba-ssm build; its times are the sixteenth session's): the
# lane forward's new options against the default, forward only, CUDA graphs, three interleaved
# rounds (fwd_knob_sweep.py): B / C rows prefetched into L1 PF_BC tiles ahead, u / delta / z
# PF_ELEM steps ahead, the local pass's dt sums reduced once at the end (DT_DEFER), and one or
# four warps a program instead of two.
source benchmarks/selective_scan/device_lib.sh
cd benchmarks/selective_scan
V="base;PF_BC=2;PF_BC=4;PF_BC=2,PF_ELEM=256;DT_DEFER=1;PF_BC=2,DT_DEFER=1;triton_fwd.FWD_WARPS=1;triton_fwd.FWD_WARPS=4"
timeout 280 python3 fwd_knob_sweep.py --variants "$V" --shapes 1x1536x4096x16,1x1024x65536x16 \
    --out $L/sweep_b1.json > $L/sweep_b1.log 2>&1
cat $L/sweep_b1.log | tail -40; el
timeout 200 python3 fwd_knob_sweep.py --variants "base;PF_BC=2;PF_BC=4;PF_BC=2,PF_ELEM=256;triton_fwd.FWD_WARPS=1" \
    --shapes 8x4096x2048x16,16x1536x1024x16 --rounds 2 --out $L/sweep_big.json > $L/sweep_big.log 2>&1
cat $L/sweep_big.log | tail -24; el
