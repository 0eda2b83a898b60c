#!/bin/bash
# One device call (sixth session): the GPU tests in two processes while mamba-ssm builds
# (.whl carried), then host time per eager call, the side-by-side benchmark (CUDA graphs too) and
# the AOTInductor load probe. Logs under $OUT. Run from the repository root.
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))s"; }
mkdir -p /tmp/mb && tar xzf .whl/mamba_ssm-*.tar.gz -C /tmp/mb
(MAX_JOBS=12 setsid nohup python3 .whl/build_mamba_cuda.py > $OUT/build.log 2>&1 &)
(python3 setup.py build_ext --inplace -q > $OUT/setup.log 2>&1 &)
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
# AOTInductor: a plain aten package built and loaded in one process, then (if that loads) the
# ssmscan module packaged and loaded in a fresh process (aoti_check.py)
mkdir -p /tmp/ao
(cd benchmarks/selective_scan && { timeout 120 python3 -X faulthandler aoti_probe.py same:plain /tmp/ao;
  echo "aoti plain same rc=$?"; } > $OUT/aoti.log 2>&1 && grep -q LOAD_OK $OUT/aoti.log &&
  { timeout 150 python3 aoti_check.py build /tmp/ao && timeout 60 python3 -X faulthandler aoti_check.py load /tmp/ao;
    echo "aoti_check rc=$?"; } >> $OUT/aoti.log 2>&1) &
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)"
P="python3 -m pytest -q -rfE -m gpu -p no:cacheprovider"
timeout ${T_TEST:-240} $P tests/ops/selective_scan/test_selective_scan_triton.py -k "test_triton_gpu and not split" \
    > $OUT/pytest_a.log 2>&1 &
PA=$!
timeout ${T_TEST:-240} $P tests/ops/selective_scan/test_triton_fwd_lane.py \
    tests/ops/selective_scan/test_selective_scan_triton.py tests/ops/linear_scan tests/ops/selective_state_update \
    -k "not (test_triton_gpu and not split and not cache and not float64)" > $OUT/pytest_b.log 2>&1 &
PB=$!
wait $PA $PB
pkill -f compile_worker; sleep 1
tail -4 $OUT/pytest_a.log; tail -6 $OUT/pytest_b.log; el
for i in $(seq 1 60); do grep -q BUILD_OK $OUT/build.log && break; sleep 5; done
tail -1 $OUT/build.log
export PYTHONPATH=$PYTHONPATH:/tmp/mbuild
cd benchmarks/selective_scan
timeout ${T_HOST:-60} python3 host_overhead.py 2>&1 | tee $OUT/host.log | grep -v "^ *[0-9]" | head -14
el
timeout ${T_BENCH:-150} python3 bench_gpu.py --graph --out $OUT/bench.json 2>&1 | tee $OUT/bench.log | grep -v '^{' | tail -24
el
tail -5 $OUT/aoti.log
