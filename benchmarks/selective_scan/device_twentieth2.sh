#!/bin/bash
# Twentieth session, call 2: the channel-thread forward capped at 128 / 168 registers (the fold one
# segment at a time, which spilled at four), with exponentials held behind the previous steps'
# updates (EXP_DEP) and B / C prefetch, against the lane forward at (1, 1536, 4096), beside mamba-ssm.
# Ran with experiments/twentieth_chan_forward.patch applied (git apply; not in the library: slower).
source benchmarks/selective_scan/device_lib.sh
start_mamba_build
gpu_tests 200 "tests/ops/selective_scan/test_selective_scan_triton.py::test_triton_gpu_forward_chan" -k "not fp16"; el
wait_mamba_build 150; el
C="triton_fwd.FWD_CHAN=1"; R="triton_fwd.CHAN_MAXNREG"; S="triton_fwd.CHAN_SEGMENTS"
cd benchmarks/selective_scan
timeout 250 python3 fwd_knob_sweep.py --mamba --rounds 3 --shapes 1x1536x4096x16 --out $L/chan_b1.json \
    --variants "base;$C,$S=22;$C,$R=128,$S=44;$C,$R=128,$S=33;$C,$R=128,$S=22;$C,$R=168,$S=33;$C,$R=128,$S=44,triton_fwd.CHAN_EXP_DEP=1;$C,$R=128,$S=44,triton_fwd.CHAN_EXP_DEP=2;$C,$R=128,$S=44,triton_fwd.CHAN_PF=1;$C,$R=128,$S=66" \
    > $L/chan_b1.log 2>&1
grep -E " ms|FAILED|Error" $L/chan_b1.log; el
timeout 120 python3 fwd_knob_sweep.py --rounds 2 --shapes 1x1024x65536x16 --dtypes bf16 --out $L/chan_long.json \
    --variants "base;$C,$R=128,$S=66;$C,$R=128,$S=132" > $L/chan_long.log 2>&1
grep -E " ms|FAILED|Error" $L/chan_long.log; el
