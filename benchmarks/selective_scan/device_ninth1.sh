#!/bin/bash
# Ninth session, first device call: every GPU test on the eighth session's unrun fixes (launcher
# wrapper, prep / finish kernel review fixes, L = 0 exit); meanwhile a native backtrace of the
# AOTInductor load crash (cuda-gdb debugs host programs; the machine has no gdb); the host
# profile of a batch-1 eager call; the benchmark beside mamba-ssm; 2- / 1-warp lane programs.
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))s"; }
L=/tmp/logs; mkdir -p $L /tmp/mb /tmp/aoti && tar xzf .whl/mamba_ssm-*.tar.gz -C /tmp/mb
(MAX_JOBS=8 setsid nohup python3 .whl/build_mamba_cuda.py > $L/build.log 2>&1 &)
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
(timeout 200 cuda-gdb -q -batch -ex "set pagination off" -ex run -ex bt -ex "info threads" \
    --args python3 benchmarks/selective_scan/aoti_probe.py same:plain /tmp/aoti \
    > $L/aoti_gdb.log 2>&1; echo "rc=$?" >> $L/aoti_gdb.log) &
timeout 230 python3 -m pytest -q -rfE -m gpu -n 8 -p no:cacheprovider tests/ -k "not float64" \
    > $L/gpu_tests.log 2>&1
grep -E "^FAILED|^ERROR|passed|failed" $L/gpu_tests.log | tail -8
el
wait
grep -v "^\[New Thread\|^\[Thread .* exited" $L/aoti_gdb.log | tail -40
cd benchmarks/selective_scan
timeout 60 python3 host_profile.py 1 1536 4096 16 --dtype bf16 > $L/host_profile.log 2>&1
grep -A34 "by tottime" $L/host_profile.log | head -80
el
for i in $(seq 1 40); do grep -q BUILD_OK $L/build.log && break; sleep 5; done
tail -1 $L/build.log
export PYTHONPATH=$PYTHONPATH:/tmp/mbuild
timeout 150 python3 bench_gpu.py --graph --bwd-variants lane --out $L/bench.json > $L/bench.log 2>&1
grep -v '^{' $L/bench.log | tail -20
el
timeout 100 python3 bench_gpu.py --graph --shapes 16x1536x1024x16,8x4096x2048x16 \
    --bwd-variants lane-w2,lane-w1 --out $L/bench_w.json > $L/bench_w.log 2>&1
grep -v '^{' $L/bench_w.log | tail -12
tar czf $OUT/logs.tar.gz -C /tmp logs; el
