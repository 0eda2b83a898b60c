#!/bin/bash
# Every GPU test of the repository (-m gpu) on the final code, 12 processes (compiles dominate);
# the float64 routing test needs the host C extension built and is left out here.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
timeout ${T:-280} python3 -m pytest -q -rfE -m gpu -n 12 -p no:cacheprovider tests/ -k "not float64" \
    > $OUT/gpu_tests.log 2>&1
tail -15 $OUT/gpu_tests.log
