#!/bin/bash
# Thirteenth session, call 4: where a compiled batch-1 training step's time goes
# (compiled_profile.py: default and reduce-overhead modes, device time by kernel, host enqueue).
source benchmarks/selective_scan/device_lib.sh
cd benchmarks/selective_scan
timeout 300 python3 compiled_profile.py 1 1536 4096 16 --dtype bf16 > $L/compiled_profile.log 2>&1
grep -v "^W1\|Warning" $L/compiled_profile.log | cut -c1-150 | tail -80; el
