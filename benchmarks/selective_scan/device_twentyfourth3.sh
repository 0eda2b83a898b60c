#!/bin/bash
# Twenty-fourth session, call 3 (carry .whl): the library's defaults (LANE_CH2 = 1, LANE_BC16 = 2)
# beside mamba-ssm's kernel built in this call: forward ms under CUDA graphs at the benchmark
# shapes with fp32 and 16-bit rows everywhere as the other variants, then the side-by-side
# benchmark (forward and forward + backward, eager and graphs).
source benchmarks/selective_scan/device_lib.sh
mkdir -p /tmp/mb && tar xzf .whl/mamba_ssm-*.tar.gz -C /tmp/mb
(MAX_JOBS=14 setsid nohup python3 .whl/build_mamba_cuda.py > /tmp/build.log 2>&1 &)
cd benchmarks/selective_scan
# compile our kernels meanwhile (no timing while the build loads the CPUs)
timeout 100 python3 fwd_knob_sweep.py --rounds 1 --shapes 1x1536x4096x16 --dtypes bf16 > /dev/null 2>&1
el
cd ../..; wait_mamba_build 240; cd benchmarks/selective_scan
el
timeout 90 python3 fwd_knob_sweep.py --rounds 3 --mamba \
    --shapes 1x1536x4096x16,8x4096x2048x16,16x1536x1024x16,1x1024x65536x16 --dtypes bf16 \
    --variants "base;triton_fwd.LANE_BC16=0;triton_fwd.LANE_BC16=1" \
    2>&1 | tee $L/sweep.log | grep -E " ms|Error|rror"
el
timeout 200 python3 bench_gpu.py --graph --out $L/bench.json > $L/bench.log 2>&1
grep -v '^{' $L/bench.log | tail -40
el
