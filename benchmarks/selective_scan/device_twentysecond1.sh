#!/bin/bash
# Twenty-second session, call 1 (run as one command line; kept here as a script): the local pass
# stores dt for the real pass (triton_fwd.LANE_DT_STORE, Note [selective scan forward dt store]).
# Its GPU tests, then forward ms under CUDA graphs against the library default (segments: the
# real pass takes 96 instead of 123 registers in bf16, so other segment counts fill its waves),
# then each kernel's time under the benchmark's conditions.
source benchmarks/selective_scan/device_lib.sh
timeout 150 python3 -m pytest -q -rfE -m gpu -n 8 -p no:cacheprovider \
    tests/ops/selective_scan/test_selective_scan_triton.py -k "dt_store" 2>&1 | tail -3
el
cd benchmarks/selective_scan
S=triton_fwd.LANE_SEGMENTS
D=triton_fwd.LANE_DT_STORE=1
timeout 240 python3 fwd_knob_sweep.py --rounds 3 --shapes 1x1536x4096x16,1x1024x65536x16 \
    --variants "base;$D;$D,$S=13;$D,$S=18;$D,$S=27" 2>&1 | grep -E " ms|Error|rror"
el
timeout 100 python3 fwd_kernel_split.py --graph --shapes 1x1536x4096x16 \
    --variants "base;$D" 2>&1 | grep -v -i warn
el
