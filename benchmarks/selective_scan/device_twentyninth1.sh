#!/bin/bash
# Twenty-ninth session, call 1 (with experiments/twentyninth_map_overlap.patch applied): the two-channel real pass's program -> multiprocessor map and
# programs of one segment placed together (ch2_map_probe.py: tables, the hot-row probes, the tanh
# gate), then the kernels' times with the probes (fwd_kernel_split.py --graph).
source benchmarks/selective_scan/device_lib.sh
cd benchmarks/selective_scan
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
timeout 220 python3 ch2_map_probe.py --rounds 5 --out $OUT/map_bf16.json 2>&1 | tee $L/map.log \
    | grep -vE "Warn|warn|^\s*$"
el
V="base;triton_fwd.LANE_PROBE_REAL=1;triton_fwd.LANE_PROBE_LOCAL=1;triton_fwd.LANE_SILU_TANH=1"
timeout 120 python3 fwd_kernel_split.py --graph --shapes 1x1536x4096x16 --dtypes bf16 \
    --variants "$V" > $L/split.log 2>&1; grep -vE "^\s*$|Warn|warn" $L/split.log | tail -30
el
timeout 150 python3 ch2_map_probe.py --rounds 3 --dtype fp32 --out $OUT/map_fp32.json 2>&1 \
    | tee $L/map32.log | grep -E " ms|identical|segments a"
el
