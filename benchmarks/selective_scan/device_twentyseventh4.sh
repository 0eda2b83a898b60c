#!/bin/bash
# Twenty-seventh session, call 4: the final defaults (the unmasked loop only where L is not
# split: triton_fwd.LANE_EVEN = 1): GPU tests of the forward and the compiled training steps
# (mamba-ssm building beside them), AOTInductor packaging of a module on the unmasked path, the
# unsplit shapes with and without it, then the full side-by-side benchmark.
source benchmarks/selective_scan/device_lib.sh
mkdir -p /tmp/mb && tar xzf .whl/mamba_ssm-*.tar.gz -C /tmp/mb
(MAX_JOBS=14 setsid nohup python3 .whl/build_mamba_cuda.py > /tmp/build.log 2>&1 &)
F=tests/ops/selective_scan/test_selective_scan_triton.py
timeout 120 python3 -m pytest -q -rfE -m gpu -n 6 -p no:cacheprovider -k "not float64" \
    $F::test_triton_gpu_forward_even $F::test_compile_fullgraph_training_step_gpu \
    $F::test_compile_fullgraph_rows16_gpu $F::test_triton_gpu_forward_two_channels \
    $F::test_triton_gpu > $L/gpu_tests.log 2>&1
grep -E "^FAILED|^ERROR|passed|failed" $L/gpu_tests.log | tail -8
grep -E "^[.FEsx]+( |$)" $L/gpu_tests.log | tr -d ' \n[%]0-9' | fold -w 100; echo
el
mkdir -p /tmp/aoti && CXX=/usr/bin/g++ timeout 90 python3 benchmarks/selective_scan/aoti_check.py \
    build /tmp/aoti bf16 16 1536 1024 > $L/aoti.log 2>&1; echo "aoti build rc=$?"
CXX=/usr/bin/g++ timeout 40 python3 benchmarks/selective_scan/aoti_check.py load /tmp/aoti bf16 \
    16 1536 1024 >> $L/aoti.log 2>&1; echo "aoti load rc=$?"; tail -2 $L/aoti.log
el
cd benchmarks/selective_scan
timeout 70 python3 fwd_knob_sweep.py --rounds 3 --shapes 8x4096x2048x16,16x1536x1024x16 \
    --dtypes bf16,fp32 --variants "base;triton_fwd.LANE_EVEN=0" 2>&1 | tee $L/sweep.log \
    | grep -E " ms|Error|rror"
el
wait_mamba_build 100
timeout 200 python3 bench_gpu.py --graph --out $L/bench.json > $L/bench.log 2>&1
grep -v '^{' $L/bench.log | tail -24
el
