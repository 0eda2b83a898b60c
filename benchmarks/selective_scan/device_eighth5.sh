#!/bin/bash
# Eighth session, call 5: the GPU tests that trace the op (torch.compile training steps, the
# launcher now passing constexpr defaults under wrap_triton), the finish kernel's and the launch
# cache's, on the final code.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
timeout 200 python3 -m pytest -q -rfE -m gpu -n 8 -p no:cacheprovider tests/ \
    -k "(compile or finish or launch_cache or prep_bc or export or aoti) and not float64" > $OUT/gpu_tests5.log 2>&1
grep -E "^FAILED|^ERROR|passed|failed" $OUT/gpu_tests5.log | tail -12
