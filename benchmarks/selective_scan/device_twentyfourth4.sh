#!/bin/bash
# Twenty-fourth session, call 4: the 16-bit rows under torch.compile (the new GPU tests), then
# the missed row's segments and program size with the two-channel real pass (fp32 rows; the
# library plans 16 segments for its 160 registers): forward ms under CUDA graphs at bf16 / fp32
# (1, 1536, 4096), 12-33 segments of tiles, and 1- / 4-warp programs.
source benchmarks/selective_scan/device_lib.sh
timeout 200 python3 -m pytest -q -rfE -m gpu -n 4 -p no:cacheprovider \
    tests/ops/selective_scan/test_selective_scan_triton.py -k "compile_fullgraph" \
    > $L/gpu_tests.log 2>&1
grep -E "^FAILED|^ERROR|passed|failed" $L/gpu_tests.log | tail -8
el
cd benchmarks/selective_scan
V="base"
for s in 12 14 20 24 33; do V="$V;triton_fwd.LANE_SEGMENTS=$s"; done
V="$V;triton_fwd.FWD_WARPS=1;triton_fwd.FWD_WARPS=4"
timeout 240 python3 fwd_knob_sweep.py --rounds 3 --shapes 1x1536x4096x16 --dtypes bf16,fp32 \
    --variants "$V" 2>&1 | tee $L/sweep.log | grep -E " ms|Error|rror"
el
