#!/bin/bash
# Nineteenth session, call 2: the lane forward with each tile's decays computed in the iteration
# before (kernel option DEC_AHEAD) against the default; the lane forward's GPU tests after the
# refactor into _fwd_tile_dt / _fwd_tile_pre; then the full benchmark beside mamba-ssm with every
# timing interleaved over three rounds (bench_gpu.py --rounds). The first two parts ran with
# experiments/nineteenth_dec_ahead.patch applied (git apply; not in the library: slower); mamba-ssm's
# build had not finished when the benchmark started, so it ran again on the warm machine (call 3:
# wait_mamba_build, then the same bench_gpu.py command).
source benchmarks/selective_scan/device_lib.sh
start_mamba_build
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw --format=csv > $L/smi.txt
cd benchmarks/selective_scan
timeout 100 python3 fwd_knob_sweep.py --rounds 2 --shapes 1x1536x4096x16,8x4096x2048x16 \
    --out $L/dec.json --variants "base;DEC_AHEAD=1" > $L/dec.log 2>&1
grep -E " ms|FAILED|Error" $L/dec.log; el
cd ../..
gpu_tests 150 "tests/ops/selective_scan/test_selective_scan_triton.py::test_triton_gpu" \
    tests/ops/selective_scan/test_triton_fwd_lane.py -k "not fp16"; el
wait_mamba_build 60; el
nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader >> $L/smi.txt
cd benchmarks/selective_scan
timeout 330 python3 bench_gpu.py --graph --api --rounds 3 --out $L/bench.json > $L/bench.log 2>&1
grep -v '^{' $L/bench.log | tail -42; el
