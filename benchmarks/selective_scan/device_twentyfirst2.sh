#!/bin/bash
# Twenty-first session, call 2: the batch-1 forward's kernels as the benchmark runs them (CUDA graph
# replays after an L2 flush: fwd_kernel_split.py --graph) against eager back-to-back calls, and two
# L2 experiments on inputs that arrive cold: PF_L2 (a bulk L2 prefetch of the program's whole
# segment on entry: 1 u / delta / z, 3 also B / C) and EVICT (eviction hints: 1 the local pass's
# u / delta evict_last and the real pass's loads evict_first, 2 only the latter). Ran with the two
# options in the kernel (experiments/twentyfirst_l2.patch; not in the library). No mamba-ssm build:
# its forward timed 0.1322-0.1335 ms at this shape in the last two sessions.
source benchmarks/selective_scan/device_lib.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw --format=csv > $L/smi.txt
cd benchmarks/selective_scan
V="base;PF_L2=1;PF_L2=3;EVICT=1;EVICT=2;PF_L2=1,EVICT=1"
timeout 150 python3 fwd_kernel_split.py --graph --shapes 1x1536x4096x16 --variants "$V" > $L/split_graph.log 2>&1
grep -v Warn $L/split_graph.log | grep -v _warn_once; el
timeout 60 python3 fwd_kernel_split.py --shapes 1x1536x4096x16 --dtypes bf16 --variants "base" > $L/split_eager.log 2>&1
grep -v Warn $L/split_eager.log | grep -v _warn_once; el
timeout 200 python3 fwd_knob_sweep.py --rounds 3 --shapes 1x1536x4096x16 --out $L/b1.json \
    --variants "$V" > $L/b1.log 2>&1
grep -E " ms|FAILED|Error" $L/b1.log; el
timeout 200 python3 fwd_knob_sweep.py --rounds 2 --shapes 8x4096x2048x16,16x1536x1024x16,1x1024x65536x16 \
    --dtypes bf16 --out $L/other.json --variants "$V" > $L/other.log 2>&1
grep -E " ms|FAILED|Error" $L/other.log; el
