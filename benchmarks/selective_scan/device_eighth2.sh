#!/bin/bash
# Eighth session, call 2: every GPU test on the fused B / C copy (prep_BC_lane) and the
# rewritten finish kernel (its tests force FINISH_KERNEL), the partial sums alone
# (bench_sum_partials.py: torch.sum vs the kernel's group size / program size / pipelining),
# the per-kernel breakdown and the side-by-side benchmark with and without the finish kernel.
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))s"; }
L=/tmp/logs; mkdir -p $L /tmp/mb && tar xzf .whl/mamba_ssm-*.tar.gz -C /tmp/mb
(MAX_JOBS=8 setsid nohup python3 .whl/build_mamba_cuda.py > $L/build.log 2>&1 &)
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
timeout 220 python3 -m pytest -q -rfE -m gpu -n 10 -p no:cacheprovider tests/ -k "not float64" \
    > $L/gpu_tests.log 2>&1
tail -6 $L/gpu_tests.log; el
cd benchmarks/selective_scan
timeout 100 python3 bench_sum_partials.py > $L/sum.txt 2>&1; cat $L/sum.txt; el
timeout 60 python3 profile_gpu.py --breakdown --shapes 8x4096x2048x16,16x1536x1024x16 \
    --dtypes bf16 --bwd-variants lane,lane-finish > $L/breakdown.txt 2>&1
grep -E "bwd=|reduce_kernel|sum_partials|elementwise|prep_bc" $L/breakdown.txt; el
for i in $(seq 1 40); do grep -q BUILD_OK $L/build.log && break; sleep 5; done
tail -1 $L/build.log
export PYTHONPATH=$PYTHONPATH:/tmp/mbuild
timeout 200 python3 bench_gpu.py --graph --bwd-variants lane,lane-finish --out $L/bench.json > $L/bench.log 2>&1
grep -v '^{' $L/bench.log | tail -36
tar czf $OUT/logs.tar.gz -C /tmp logs; el
