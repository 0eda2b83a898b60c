#!/bin/bash
# Ninth session, third device call: AOTInductor on the GPU with the load crash's cause worked
# around (ssmscan package built with the system compiler, CXX=/usr/bin/g++; and with the default
# compiler, loaded with the system libstdc++ preloaded), each loaded in a fresh process, fp32 and
# bf16; every GPU test on FWD_WARPS = 2 and the host-path changes; the host breakdown (the
# autograd engine's share); the benchmark with the public API in eager.
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))s"; }
R=$PWD; L=/tmp/logs; mkdir -p $L /tmp/mb /tmp/a32 /tmp/a16 /tmp/apre && tar xzf .whl/mamba_ssm-*.tar.gz -C /tmp/mb
(MAX_JOBS=8 setsid nohup python3 .whl/build_mamba_cuda.py > $L/build.log 2>&1 &)
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
A=$R/benchmarks/selective_scan/aoti_check.py
( {
  echo "CXX in the environment: ${CXX:-unset}"
  CXX=/usr/bin/g++ timeout 200 python3 $A build /tmp/a32 2>&1 | grep -v Warning | tail -3
  timeout 60 python3 $A load /tmp/a32 2>&1 | tail -2; echo "[fp32 system g++] rc=${PIPESTATUS[0]}"
  CXX=/usr/bin/g++ timeout 200 python3 $A build /tmp/a16 bf16 2>&1 | grep -v Warning | tail -2
  timeout 60 python3 $A load /tmp/a16 bf16 2>&1 | tail -2; echo "[bf16 system g++] rc=${PIPESTATUS[0]}"
  timeout 200 python3 $A build /tmp/apre 2>&1 | grep -v Warning | tail -2
  LD_PRELOAD=$(g++ -print-file-name=libstdc++.so.6) timeout 60 python3 $A load /tmp/apre 2>&1 \
    | tail -2; echo "[fp32 default CXX, libstdc++ preloaded] rc=${PIPESTATUS[0]}"
  W=$(python3 -c "
import zipfile; z = zipfile.ZipFile('/tmp/a32/scan.pt2'); z.extractall('/tmp/a32/x')
print([n for n in z.namelist() if n.endswith('.so')][0])")
  echo "system-g++ wrapper: std:: defined $(nm -C -D --defined-only /tmp/a32/x/$W | grep -c 'std::'); $(ldd /tmp/a32/x/$W | grep -c stdc++) libstdc++ dependency"
} > $L/aoti.log 2>&1 ) &
timeout 230 python3 -m pytest -q -rfE -m gpu -n 8 -p no:cacheprovider tests/ -k "not float64" \
    > $L/gpu_tests.log 2>&1
grep -E "^FAILED|^ERROR|passed|failed" $L/gpu_tests.log | tail -8
el
wait
cat $L/aoti.log | cut -c1-300
cd benchmarks/selective_scan
for i in $(seq 1 40); do grep -q BUILD_OK $L/build.log && break; sleep 5; done
tail -1 $L/build.log; el
for dt in bf16 fp32; do timeout 60 python3 host_breakdown.py 1 1536 4096 16 --dtype $dt; done \
    > $L/host_breakdown.log 2>&1
grep -v "compiled.run\|kernel\[grid\]" $L/host_breakdown.log | sed 's/ \+/ /g'
el
export PYTHONPATH=$PYTHONPATH:/tmp/mbuild
timeout 200 python3 bench_gpu.py --graph --api --out $L/bench.json > $L/bench.log 2>&1
grep -v '^{' $L/bench.log | tail -32
tar czf $OUT/logs.tar.gz -C /tmp logs; el
