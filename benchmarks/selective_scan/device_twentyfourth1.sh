#!/bin/bash
# Twenty-fourth session, call 1 (carry .whl): 16-bit B / C rows in the lane forward
# (triton_fwd.LANE_BC16, Note [selective scan forward 16-bit rows]). While mamba-ssm's kernel
# builds: each kernel's time under the benchmark's conditions (graph replay after an L2 flush)
# with and without the 16-bit rows, then the forward's GPU tests of 16-bit inputs; then forward
# ms under CUDA graphs at the benchmark shapes beside mamba-ssm's kernel, the fp32 rows, their
# one-channel real pass and 22 segments as the other variants.
source benchmarks/selective_scan/device_lib.sh
start_mamba_build
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
python3 -c "import torch, triton; print(torch.__version__, torch.version.cuda, triton.__version__)"
cd benchmarks/selective_scan
timeout 120 python3 fwd_kernel_split.py --graph --shapes 1x1536x4096x16 --dtypes bf16 \
    --variants "base;triton_fwd.LANE_BC16=0;triton_fwd.LANE_CH2=0;triton_fwd.LANE_CH2=0,triton_fwd.LANE_BC16=0;triton_fwd.LANE_SEGMENTS=22" \
    2>&1 | tee $L/split.log | grep -vE "^\s*$" | tail -40
el
cd ../..
timeout 170 python3 -m pytest -q -rfE -m gpu -n 8 -p no:cacheprovider \
    tests/ops/selective_scan/test_selective_scan_triton.py -k "not float64 and (bf16 or fp16)" \
    > $L/gpu_tests.log 2>&1
grep -E "^FAILED|^ERROR|passed|failed" $L/gpu_tests.log | tail -8
el
wait_mamba_build 120
el
cd benchmarks/selective_scan
timeout 260 python3 fwd_knob_sweep.py --rounds 3 --mamba \
    --shapes 1x1536x4096x16,16x1536x1024x16,8x4096x2048x16,1x1024x65536x16 \
    --variants "base;triton_fwd.LANE_BC16=0;triton_fwd.LANE_CH2=0;triton_fwd.LANE_SEGMENTS=22" \
    2>&1 | tee $L/sweep.log | grep -E " ms|Error|rror"
el
