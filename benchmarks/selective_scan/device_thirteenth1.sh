#!/bin/bash
# For the next device session (written in the twelfth): the reduce-overhead compile GPU test and
# the whole GPU suite with the traced backward's prefetch off (Note [traced kernels' inline
# asm]: not yet run on a GPU), then the batch-1 training step in eager, under
# torch.compile(mode="reduce-overhead") and beside mamba-ssm (compiled_step.py), then the
# benchmark. One call (logs under $OUT/logs).
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))s"; }
L=${OUT:-/tmp}/logs; mkdir -p $L
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
mkdir -p /tmp/mb && tar xzf .whl/mamba_ssm-*.tar.gz -C /tmp/mb
(MAX_JOBS=8 setsid nohup python3 .whl/build_mamba_cuda.py > /tmp/build.log 2>&1 &)
timeout 330 python3 -m pytest -q -rfE -m gpu -n 8 -p no:cacheprovider tests/ -k "not float64" \
    > $L/gpu_tests.log 2>&1
grep -E "^FAILED|^ERROR|passed|failed|could not compile|assuming every input" $L/gpu_tests.log | tail -8; el
cd benchmarks/selective_scan
for i in $(seq 1 60); do grep -q BUILD_OK /tmp/build.log && break; sleep 5; done
cp /tmp/build.log $L/; tail -1 /tmp/build.log; el
export PYTHONPATH=$PYTHONPATH:/tmp/mbuild
for d in bf16 fp32; do timeout 60 python3 compiled_step.py 1 1536 4096 16 --dtype $d; done \
    > $L/compiled_step.log 2>&1
grep -v "^W1\|Warning" $L/compiled_step.log | tail -10; el
timeout 150 python3 bench_gpu.py --graph --api --out $L/bench.json > $L/bench.log 2>&1
grep -v '^{' $L/bench.log | tail -34; el
