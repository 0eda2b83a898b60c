#!/bin/bash
# Twenty-second session, call 6 (run as one command line; kept here as a script; call 5, the
# whole forward GPU suite with LANE_CH2 = 1, lost its machine twice): the two-channel GPU tests,
# then forward ms under CUDA graphs, two-channel (LANE_CH2=1) against one-channel real pass, at
# the large-batch benchmark shapes (no segments) and the batch-1 ones.
source benchmarks/selective_scan/device_lib.sh
timeout 150 python3 -m pytest -q -rfE -m gpu -n 8 -p no:cacheprovider \
    tests/ops/selective_scan/test_selective_scan_triton.py -k "two_channels" 2>&1 | tail -3
el
cd benchmarks/selective_scan
timeout 250 python3 fwd_knob_sweep.py --rounds 3 \
    --shapes 8x4096x2048x16,16x1536x1024x16,1x1536x4096x16,1x1024x65536x16 \
    --variants "triton_fwd.LANE_CH2=0;triton_fwd.LANE_CH2=1" 2>&1 | grep -E " ms|Error|rror"
el
