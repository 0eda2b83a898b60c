#!/bin/bash
# Twenty-seventh session, call 3: the unmasked loop with u, delta, z two tiles ahead
# (triton_fwd.LANE_EVEN_AHEAD = 2, with LANE_EVEN / LANE_I32): GPU tests of the forward (mamba-ssm
# building beside them), the kernels' durations and a sweep beside mamba-ssm at the missed row
# (every variant checked against float64 first), then the full side-by-side benchmark.
source benchmarks/selective_scan/device_lib.sh
mkdir -p /tmp/mb && tar xzf .whl/mamba_ssm-*.tar.gz -C /tmp/mb
(MAX_JOBS=14 setsid nohup python3 .whl/build_mamba_cuda.py > /tmp/build.log 2>&1 &)
F=tests/ops/selective_scan/test_selective_scan_triton.py
timeout 150 python3 -m pytest -q -rfE -m gpu -n 6 -p no:cacheprovider -k "not float64" \
    $F::test_triton_gpu_forward_even $F::test_triton_gpu_forward_two_channels \
    $F::test_triton_gpu $F::test_triton_gpu_forward_local_tiles $F::test_triton_gpu_forward_rows16 \
    > $L/gpu_tests.log 2>&1
grep -E "^FAILED|^ERROR|passed|failed" $L/gpu_tests.log | tail -8; grep -E "^[.FEsx]+( |$)" $L/gpu_tests.log | tr -d ' \n[%]0-9' | fold -w 100; echo
el
cd benchmarks/selective_scan
E=triton_fwd.LANE_EVEN; I=triton_fwd.LANE_I32; A=triton_fwd.LANE_EVEN_AHEAD
timeout 60 python3 fwd_kernel_split.py --graph --shapes 1x1536x4096x16 --dtypes bf16 \
    --variants "base;$E=0,$I=0;$A=1" 2>&1 | tee $L/split.log | tail -18
el
wait_mamba_build 100
el
timeout 100 python3 fwd_knob_sweep.py --mamba --rounds 5 --shapes 1x1536x4096x16 --dtypes bf16,fp32 \
    --variants "base;$E=0,$I=0;$A=1;$I=0" 2>&1 | tee $L/sweep.log | grep -E " ms|Error|rror"
el
timeout 230 python3 bench_gpu.py --graph --out $L/bench.json > $L/bench.log 2>&1
grep -v '^{' $L/bench.log | tail -40
el
