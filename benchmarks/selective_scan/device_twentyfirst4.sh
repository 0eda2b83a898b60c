#!/bin/bash
# Twenty-first session, call 4: the real pass with fewer registers and more resident warps. Its
# rolled B / C rows hold ~64 of its 121 registers (4 warps a scheduler); BC_JIT (rows loaded in
# the tile that uses them) takes it to 80 (sm_90 SASS), with PF_BC = 1 (their L1 prefetch a tile
# ahead) to 64: 16 two-warp programs a multiprocessor, so 22 segments are one wave. The seventeenth
# session timed BC_JIT at other segment counts and before the later kernel changes. Both passes
# (LANE_OPTIONS) or the real pass only (triton_fwd.LANE_REAL_JIT / LANE_REAL_PF), at several
# segment counts; forward under CUDA graphs, each variant checked against float64 first, and
# each kernel's time under the benchmark's conditions. Ran with
# experiments/twentyfirst_real_jit.patch applied (git apply).
source benchmarks/selective_scan/device_lib.sh
cd benchmarks/selective_scan
S="triton_fwd.LANE_SEGMENTS"
R="triton_fwd.LANE_REAL_JIT=1"
V="base;BC_JIT=1;BC_JIT=1,$S=16;BC_JIT=1,$S=33;BC_JIT=1,PF_BC=1;BC_JIT=1,PF_BC=2;$R;$R,$S=16;$R,$S=33"
V="$V;$R,triton_fwd.LANE_REAL_PF=1;$R,triton_fwd.LANE_REAL_PF=2;$R,triton_fwd.LANE_REAL_PF=1,$S=33"
timeout 240 python3 fwd_knob_sweep.py --rounds 3 --shapes 1x1536x4096x16 --out $L/b1.json \
    --variants "$V" > $L/b1.log 2>&1
grep -E " ms|FAILED|Error" $L/b1.log; el
timeout 120 python3 fwd_kernel_split.py --graph --shapes 1x1536x4096x16 --dtypes bf16 \
    --variants "base;BC_JIT=1,PF_BC=1;$R,triton_fwd.LANE_REAL_PF=1;$R,$S=16" > $L/split.log 2>&1
grep -v Warn $L/split.log | grep -v _warn_once; el
timeout 200 python3 fwd_knob_sweep.py --rounds 2 --shapes 8x4096x2048x16,16x1536x1024x16,1x1024x65536x16 \
    --dtypes bf16 --out $L/other.json --variants "$V" > $L/other.log 2>&1
grep -E " ms|FAILED|Error" $L/other.log; el
