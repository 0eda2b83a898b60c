#!/bin/bash
# Twentieth session, call 1: the channel-thread forward (triton_fwd_chan, FWD_CHAN) against the
# lane forward where L is split: its GPU tests, then forward timings under CUDA graphs over its
# segment counts, warps, a register cap and B / C prefetch, beside mamba-ssm once its build is done.
# Ran with experiments/twentieth_chan_forward.patch applied (git apply; not in the library: slower),
# in an earlier form whose fold issued four segments' loads together (the patch's FOLD=4).
source benchmarks/selective_scan/device_lib.sh
start_mamba_build
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw --format=csv > $L/smi.txt
gpu_tests 200 "tests/ops/selective_scan/test_selective_scan_triton.py::test_triton_gpu_forward_chan"; el
wait_mamba_build 150; el
C="triton_fwd.FWD_CHAN=1"
cd benchmarks/selective_scan
timeout 280 python3 fwd_knob_sweep.py --mamba --rounds 3 --shapes 1x1536x4096x16 --out $L/chan_b1.json \
    --variants "base;$C,triton_fwd.CHAN_SEGMENTS=11;$C,triton_fwd.CHAN_SEGMENTS=22;$C,triton_fwd.CHAN_SEGMENTS=33;$C,triton_fwd.CHAN_SEGMENTS=44;$C,triton_fwd.CHAN_SEGMENTS=66;$C,triton_fwd.CHAN_SEGMENTS=22,triton_fwd.CHAN_PF=1;$C,triton_fwd.CHAN_SEGMENTS=44,triton_fwd.CHAN_MAXNREG=168;$C,triton_fwd.CHAN_SEGMENTS=22,triton_fwd.CHAN_WARPS=2" \
    > $L/chan_b1.log 2>&1
grep -E " ms|FAILED|Error" $L/chan_b1.log; el
timeout 150 python3 fwd_knob_sweep.py --mamba --rounds 2 --shapes 1x1024x65536x16,2x1536x4096x16 --out $L/chan_long.json \
    --variants "base;$C;$C,triton_fwd.CHAN_SEGMENTS=64;$C,triton_fwd.CHAN_SEGMENTS=128" \
    > $L/chan_long.log 2>&1
grep -E " ms|FAILED|Error" $L/chan_long.log; el
