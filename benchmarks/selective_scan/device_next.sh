#!/bin/bash
# First device call prepared for the next session (written 2026-12-01, eighth session, after the
# GPU time ran out): the launcher's last fix (its wrap_triton wrapper made with wrapping on) was
# not run on a GPU; the two torch.compile training steps failed without it. Runs every GPU test
# (those two first), then the benchmark (.whl carried: mamba-ssm builds meanwhile).
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))s"; }
L=/tmp/logs; mkdir -p $L /tmp/mb && tar xzf .whl/mamba_ssm-*.tar.gz -C /tmp/mb
(MAX_JOBS=8 setsid nohup python3 .whl/build_mamba_cuda.py > $L/build.log 2>&1 &)
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
timeout 120 python3 -m pytest -q -rfE -m gpu -p no:cacheprovider \
    tests/ops/selective_scan/test_selective_scan_triton.py -k compile_fullgraph > $L/compile.log 2>&1
grep -E "^FAILED|passed|failed" $L/compile.log | tail -4; el
timeout 230 python3 -m pytest -q -rfE -m gpu -n 10 -p no:cacheprovider tests/ -k "not float64" \
    > $L/gpu_tests.log 2>&1
grep -E "^FAILED|passed|failed" $L/gpu_tests.log | tail -8; el
cd benchmarks/selective_scan
for i in $(seq 1 40); do grep -q BUILD_OK $L/build.log && break; sleep 5; done
tail -1 $L/build.log
export PYTHONPATH=$PYTHONPATH:/tmp/mbuild
timeout 150 python3 bench_gpu.py --graph --bwd-variants lane --out $L/bench.json > $L/bench.log 2>&1
grep -v '^{' $L/bench.log | tail -20
tar czf $OUT/logs.tar.gz -C /tmp logs; el
