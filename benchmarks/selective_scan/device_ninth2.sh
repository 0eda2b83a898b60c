#!/bin/bash
# Ninth session, second device call: GPU tests on the eager fast path (Note [eager CUDA fast
# path]) and the flat traced tensors (Note [flat traced tensors]: the dynamic compile's torch 2.11
# Inductor assertion); meanwhile the AOTInductor load crash's environment (which C++ runtime
# the process maps against what g++ compiled for; loads with LC_ALL=C / g++'s libstdc++
# preloaded); then the host breakdown and the benchmark (public API in eager too; 2-warp lane
# programs beside the default).
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))s"; }
R=$PWD; L=/tmp/logs; mkdir -p $L /tmp/mb /tmp/aoti2 && tar xzf .whl/mamba_ssm-*.tar.gz -C /tmp/mb
(MAX_JOBS=8 setsid nohup python3 .whl/build_mamba_cuda.py > $L/build.log 2>&1 &)
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
( cd /tmp && {
  echo "== g++: $(g++ --version | head -1) | c++ -> $(readlink -f "$(which c++)")"
  python3 -c "import torch._inductor.cpp_builder as b; print('inductor cxx:', b.get_cpp_compiler())"
  python3 -c "
import torch
m = open('/proc/self/maps').read().splitlines()
print('mapped:', sorted({l.split()[-1] for l in m if 'libstdc++' in l or 'libgcc_s' in l}))"
  echo "g++ libstdc++: $(readlink -f "$(g++ -print-file-name=libstdc++.so.6)")"
  ls -la /lib/x86_64-linux-gnu/libstdc++.so.6* /usr/lib/x86_64-linux-gnu/libstdc++.so.6* 2>&1 | head
  timeout 150 python3 $R/benchmarks/selective_scan/aoti_probe.py build:plain /tmp/aoti2 2>&1 | tail -2
  python3 -c "
import zipfile, sys; z = zipfile.ZipFile('/tmp/aoti2/plain.pt2'); z.extractall('/tmp/aoti2/x')
print([n for n in z.namelist() if n.endswith('.so')])"
  W=$(find /tmp/aoti2/x -name "*.so" | head -1); echo "so: $W"; ldd "$W"
  echo "std:: symbols defined in it: $(nm -C -D --defined-only "$W" | grep -c 'std::')"
  nm -C -D --defined-only "$W" | grep -i "codecvt\|locale::\|regex_traits" | head -5
  for e in "X=1" "LC_ALL=C" "LD_PRELOAD=$(g++ -print-file-name=libstdc++.so.6)"; do
    env "$e" timeout 60 python3 $R/benchmarks/selective_scan/aoti_probe.py load:plain /tmp/aoti2 \
      2>&1 | tail -2; echo "[$e] rc=${PIPESTATUS[0]}"
  done
} > $L/aoti_diag.log 2>&1 ) &
timeout 230 python3 -m pytest -q -rfE -m gpu -n 8 -p no:cacheprovider tests/ -k "not float64" \
    > $L/gpu_tests.log 2>&1
grep -E "^FAILED|^ERROR|passed|failed" $L/gpu_tests.log | tail -8
el
wait
cat $L/aoti_diag.log | cut -c1-300 | tail -40
cd benchmarks/selective_scan
for i in $(seq 1 40); do grep -q BUILD_OK $L/build.log && break; sleep 5; done
tail -1 $L/build.log; el
for dt in bf16 fp32; do timeout 60 python3 host_breakdown.py 1 1536 4096 16 --dtype $dt; done \
    > $L/host_breakdown.log 2>&1
cat $L/host_breakdown.log | sed 's/ \+/ /g'
el
export PYTHONPATH=$PYTHONPATH:/tmp/mbuild
timeout 300 python3 bench_gpu.py --graph --api --bwd-variants lane,lane-w2 --out $L/bench.json \
    > $L/bench.log 2>&1
grep -v '^{' $L/bench.log | tail -36
tar czf $OUT/logs.tar.gz -C /tmp logs; el
