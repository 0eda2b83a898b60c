#!/bin/bash
# One device call prepared for the next session (written 2026-12-01, seventh session, after the
# GPU time ran out): the dB / dC finish kernel (triton_bwd.FINISH_KERNEL, off by default, never
# run on a GPU) -- its GPU tests, then kernel by kernel beside torch.sum (profile_gpu.py), then
# the side-by-side benchmark with and without it (.whl carried: mamba-ssm builds meanwhile).
# If it is correct and not slower: FINISH_KERNEL = True, and record the numbers.
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))s"; }
L=/tmp/logs; mkdir -p $L /tmp/mb && tar xzf .whl/mamba_ssm-*.tar.gz -C /tmp/mb
(MAX_JOBS=12 setsid nohup python3 .whl/build_mamba_cuda.py > $L/build.log 2>&1 &)
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
timeout 150 python3 -m pytest -q -rfE -m gpu -n 8 -p no:cacheprovider \
    tests/ops/selective_scan/test_selective_scan_triton.py -k "finish_kernel or (split_backward and lane and segments)" \
    > $L/pytest.log 2>&1
tail -3 $L/pytest.log; el
cd benchmarks/selective_scan
timeout 90 python3 profile_gpu.py --breakdown --shapes 8x4096x2048x16,16x1536x1024x16,1x1536x4096x16 \
    --dtypes bf16,fp32 --bwd-variants lane,lane-finish > $L/breakdown.txt 2>&1
grep -E "bwd=|reduce_kernel|sum_partials|elementwise" $L/breakdown.txt; el
for i in $(seq 1 40); do grep -q BUILD_OK $L/build.log && break; sleep 5; done
tail -1 $L/build.log
export PYTHONPATH=$PYTHONPATH:/tmp/mbuild
timeout 230 python3 bench_gpu.py --graph --bwd-variants lane,lane-finish --out $L/bench.json > $L/bench.log 2>&1
grep -v '^{' $L/bench.log | tail -36
tar czf $OUT/logs.tar.gz -C /tmp logs; el
