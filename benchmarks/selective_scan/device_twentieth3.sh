#!/bin/bash
# Twentieth session, call 3: what the lane forward's in-kernel fold over earlier segments costs.
# Each kernel's GPU time (fwd_kernel_split.py: the B / C copy, the local pass, the real pass) and
# the forward under CUDA graphs, for the library's fold, no fold (FOLD_SKIP=1: wrong results, a
# bound) and one load of a carried state in its place (FOLD_SKIP=2: what a carry computed elsewhere
# would cost the real pass; also wrong here). FOLD_SKIP was a temporary kernel option of this call.
# Ran with experiments/twentieth_fold_skip.patch applied (git apply; not in the library).
source benchmarks/selective_scan/device_lib.sh
cd benchmarks/selective_scan
timeout 150 python3 fwd_kernel_split.py --shapes 1x1536x4096x16,1x1024x65536x16 \
    --variants "base;FOLD_SKIP=1;FOLD_SKIP=2" > $L/split.log 2>&1
cat $L/split.log | grep -v Warning; el
timeout 200 python3 fwd_knob_sweep.py --no-check --rounds 3 --shapes 1x1536x4096x16,1x1024x65536x16 \
    --out $L/fold.json --variants "base;FOLD_SKIP=1;FOLD_SKIP=2" > $L/fold.log 2>&1
grep -E " ms|Error" $L/fold.log; el
