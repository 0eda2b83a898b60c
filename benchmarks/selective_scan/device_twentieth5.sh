#!/bin/bash
# Twentieth session, call 5: the real pass's y epilogue (reduce-scatter over lanes, D, gate, store)
# of each tile moved into the next tile's steps (the lane kernel's Y_DEFER = the step it runs at),
# so that each warp's MUFU-dense steps carry some of the MUFU-free work: the real pass issues 325
# instructions a tile-warp against 288 MUFU cycles but takes about their sum (56 us against a 30.5
# us issue floor). Each kernel's GPU time, then the forward under CUDA graphs.
# Ran with experiments/twentieth_y_defer.patch applied (git apply; not in the library: slower).
source benchmarks/selective_scan/device_lib.sh
cd benchmarks/selective_scan
V="base;Y_DEFER=1;Y_DEFER=3;Y_DEFER=5;Y_DEFER=7"
timeout 100 python3 fwd_kernel_split.py --shapes 1x1536x4096x16 --dtypes bf16 --variants "$V" > $L/split.log 2>&1
grep -v -i warn $L/split.log | grep -E "bf16|lane"; el
timeout 240 python3 fwd_knob_sweep.py --rounds 3 --shapes 1x1536x4096x16,8x4096x2048x16,1x1024x65536x16 \
    --out $L/ydefer.json --variants "$V" > $L/ydefer.log 2>&1
grep -E " ms|FAILED|Error" $L/ydefer.log; el
