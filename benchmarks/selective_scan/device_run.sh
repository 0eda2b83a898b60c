#!/bin/bash
# One device call: build mamba-ssm in the background, install ssmscan, run the GPU tests, the
# AOTInductor check, then the side-by-side benchmark once mamba-ssm is built. Writes under $OUT.
set -x
mkdir -p /tmp/mb && tar xzf .whl/mamba_ssm-*.tar.gz -C /tmp/mb
(MAX_JOBS=14 setsid nohup python3 .whl/build_mamba_cuda.py > $OUT/build.log 2>&1 &)
python3 setup.py build_ext --inplace -q > $OUT/setup.log 2>&1 || echo "C build failed (CPU kernels only)"
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())"
timeout 200 python3 -m pytest -q -rfE -m "gpu" -p no:cacheprovider tests/ops/selective_scan/test_selective_scan_triton.py tests/ops/linear_scan/test_linear_scan_triton.py tests/ops/selective_state_update 2>&1 | tee $OUT/pytest_gpu.log | tail -25
mkdir -p /tmp/aoti && timeout 150 python3 benchmarks/selective_scan/aoti_check.py build /tmp/aoti 2>&1 | tee $OUT/aoti.log | tail -4
timeout 60 python3 benchmarks/selective_scan/aoti_check.py load /tmp/aoti 2>&1 | tee -a $OUT/aoti.log | tail -3
for i in $(seq 1 60); do grep -q BUILD_OK $OUT/build.log && break; sleep 5; done
tail -2 $OUT/build.log
PYTHONPATH=$PYTHONPATH:/tmp/mbuild timeout 240 python3 benchmarks/selective_scan/bench_gpu.py --out $OUT/bench.json --ck ${CKS:-256} 2>&1 | tee $OUT/bench.log | tail -40
