#!/bin/bash
# One device call (fifth session): mamba-ssm built in the background (.whl carried), then the
# steps named in STEPS (default all, in this order): err (errors vs float64 over the GPU test
# grid, the default backward; ERR_VARIANT=split for the split kernel's grid), tune (register-cap
# sweeps, tune_regs.py), host (host time per eager call, launch cache on / off), bench
# (bench_gpu.py side by side with mamba-ssm, CUDA graphs too; VARIANTS = backward variants),
# first (GPU tests selected by FIRST_K, before the rest), test (the GPU tests, TEST_K selects).
# Logs under $OUT. Run from the repository root.
T0=$(date +%s)
STEPS=${STEPS:-err first tune host bench test}
el() { echo "t=$(( $(date +%s) - T0 ))s"; }
has() { [[ " $STEPS " == *" $1 "* ]]; }
mkdir -p /tmp/mb && tar xzf .whl/mamba_ssm-*.tar.gz -C /tmp/mb
(MAX_JOBS=14 setsid nohup python3 .whl/build_mamba_cuda.py > $OUT/build.log 2>&1 &)
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)"
if has err; then
  timeout ${T_ERR:-120} python3 benchmarks/selective_scan/gpu_errors.py cuda $ERR_VARIANT 2>&1 | tee $OUT/gpu_errors.log | tail -3
  el
fi
if has first; then
  timeout ${T_FIRST:-60} python3 -m pytest -q -rfE -m gpu -p no:cacheprovider -k "$FIRST_K" tests/ops \
      2>&1 | tee $OUT/pytest_first.log | tail -3
  el
fi
cd benchmarks/selective_scan
if has tune; then
  timeout ${T_TUNE:-200} python3 tune_regs.py ${SHAPES:+--shapes $SHAPES} 2>&1 | tee $OUT/tune_regs.log | grep -v Warn
  el
fi
for i in $(seq 1 60); do grep -q BUILD_OK $OUT/build.log && break; sleep 5; done
tail -1 $OUT/build.log
export PYTHONPATH=$PYTHONPATH:/tmp/mbuild
if has host; then
  timeout ${T_HOST:-60} python3 host_overhead.py 2>&1 | tee $OUT/host.log | grep -v "^ *[0-9]" | head -12
  el
fi
if has bench; then
  timeout ${T_BENCH:-200} python3 bench_gpu.py ${VARIANTS:+--bwd-variants=$VARIANTS} ${FWD_VARIANTS:+--fwd-variants=$FWD_VARIANTS} --graph \
      ${SHAPES:+--shapes $SHAPES} --out $OUT/bench.json 2>&1 | tee $OUT/bench.log | grep -v '^{' | tail -40
  el
fi
cd ../..
if has test; then
  timeout ${T_TEST:-150} python3 -m pytest -q -rfE -m gpu -p no:cacheprovider ${TEST_K:+-k "$TEST_K"} \
      tests/ops 2>&1 | tee $OUT/pytest_gpu.log | tail -6
  el
fi
