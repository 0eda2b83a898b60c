#!/bin/bash
# Twenty-second session, call 3 (run as one command line; kept here as a script): the real pass
# with two channels a thread (triton_fwd.LANE_CH2, triton_fwd_lane2; Note [selective scan
# forward two channels a thread]): half the L1 wavefronts of its B / C rows. GPU tests, forward
# ms under CUDA graphs against the library (segments and a 128-register cap, which fit its
# programs into whole waves: 160 registers, 6 two-warp programs a multiprocessor, or 8 at 128),
# each kernel's time, then Nsight Compute's L1 numbers for it.
source benchmarks/selective_scan/device_lib.sh
timeout 170 python3 -m pytest -q -rfE -m gpu -n 8 -p no:cacheprovider \
    tests/ops/selective_scan/test_selective_scan_triton.py -k "two_channels" 2>&1 | tail -3
el
cd benchmarks/selective_scan
S=triton_fwd.LANE_SEGMENTS
C=triton_fwd.LANE_CH2=1
R=triton_fwd.LANE_CH2_REGS=128
timeout 300 python3 fwd_knob_sweep.py --rounds 3 --shapes 1x1536x4096x16,1x1024x65536x16 \
    --variants "base;$C;$C,$S=16;$C,$S=33;$C,$R;$C,$R,$S=44" 2>&1 | grep -E " ms|Error|rror"
el
timeout 100 python3 fwd_kernel_split.py --graph --shapes 1x1536x4096x16 \
    --variants "base;$C;$C,$S=16;$C,$R" 2>&1 | grep -v -i warn
el
