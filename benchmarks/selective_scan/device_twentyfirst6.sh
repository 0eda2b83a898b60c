#!/bin/bash
# Twenty-first session, call 6 (run as one command line; kept here as a script): more segments at
# batch 1. Finer segments shorten the local pass (mix_probe.py: two local passes side by side ran
# 8% faster than in series) but lengthen the real pass's fold: forward under CUDA graphs, then
# each kernel's time under the benchmark's conditions. Library kernels.
source benchmarks/selective_scan/device_lib.sh
cd benchmarks/selective_scan
S=triton_fwd.LANE_SEGMENTS
timeout 200 python3 fwd_knob_sweep.py --rounds 3 --shapes 1x1536x4096x16 \
    --variants "base;$S=33;$S=44;$S=66;$S=88" 2>&1 | grep -E " ms|Error"
timeout 100 python3 fwd_kernel_split.py --graph --shapes 1x1536x4096x16 --dtypes bf16 \
    --variants "base;$S=44;$S=66" 2>&1 | grep -v -i warn
